//! Running a script: one Lua state per worker thread.
//!
//! Commands run on every runtime worker, and a Lua state cannot be shared between
//! threads, so each thread keeps its own state and the functions it compiled in
//! it, by SHA1; the bodies themselves are shared ([`Scripts`]), so EVALSHA works
//! on any thread. SCRIPT FLUSH raises a generation number, and a thread whose
//! state is older starts a new one before its next script.
//!
//! A script runs under `xpcall` with a message handler that, like Redis's, turns
//! any error into `{err=…}` and notes the script line it came from, for Redis's
//! `<error> script: <sha>, on @user_script:<line>.` reply. An instruction-count
//! hook ([`interrupt`]) stops a killed script.

use std::cell::{Cell, RefCell};
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use mlua::{ffi, BorrowedBytes, Function, Lua, MultiValue, Table, Value};
use relcache_protocol::resp::Frame;
use smallvec::SmallVec;

use super::convert::{frame_to_lua, lua_to_frame, Resp};
use super::interrupt::{self, KILLED};
use super::sandbox::{error_table, new_state, CallError, State};
use super::{Running, Script, Scripts};
use crate::stats::Gauge;

/// Runs one command for the script (`redis.call` / `redis.pcall`): its reply, or
/// an error frame for a refused or failed command.
pub type Dispatch<'d> = dyn FnMut(&[&[u8]], Resp) -> Frame + 'd;

/// One run of a script.
pub struct Invocation<'i> {
    pub script: &'i Script,
    pub keys: &'i [&'i [u8]],
    pub argv: &'i [&'i [u8]],
    pub running: Arc<Running>,
}

struct Runtime {
    state: State,
    /// The `xpcall` message handler ([`on_error`]).
    handler: Function,
    generation: u64,
    functions: ahash::HashMap<String, Function>,
    /// The state's memory as it last went into [`VM_MEMORY`].
    published: i64,
}

/// The memory of every thread's Lua state, as each last published it (INFO's
/// `used_memory_lua`). A state publishes after a run only once it has moved by
/// [`PUBLISH_STEP`] since, so a short script's run costs a load and a compare
/// here; a state that goes takes its share back.
static VM_MEMORY: Gauge = Gauge::new();
const PUBLISH_STEP: i64 = 4096;

/// The memory of the threads' Lua states (to [`PUBLISH_STEP`] each).
pub fn vm_memory() -> u64 {
    VM_MEMORY.get().max(0) as u64
}

impl Runtime {
    fn publish(&mut self) {
        let now = self.state.lua.used_memory() as i64;
        if (now - self.published).abs() >= PUBLISH_STEP {
            VM_MEMORY.add(now - self.published);
            self.published = now;
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        VM_MEMORY.add(-self.published);
    }
}

/// How many compiled functions a thread may hold beyond the scripts cached before
/// it drops those no longer cached.
const COMPILED_SLACK: usize = 500;

thread_local! {
    static RUNTIME: RefCell<Option<Runtime>> = const { RefCell::new(None) };
    /// The dispatch of the script running on this thread, while [`run_in`] runs
    /// it (a `&mut Dispatch` with its lifetime erased; see [`DispatchSet`]).
    static DISPATCH: Cell<Option<NonNull<()>>> = const { Cell::new(None) };
    /// The protocol the script running on this thread chose (`redis.setresp`);
    /// kept here rather than in a Lua table, which `redis.call` read each time.
    static RESP: Cell<Resp> = const { Cell::new(Resp::Two) };
}

/// `redis.setresp`, its argument checked already.
pub(super) fn choose_resp(n: i64) {
    RESP.set(if n == 3 { Resp::Three } else { Resp::Two });
}

/// Makes `dispatch` the one `redis.call` and `redis.pcall` reach until dropped.
///
/// The two functions are made once per Lua state rather than as scoped closures
/// for each run: a scoped function is a userdata that each run made and the
/// collector then finalized, three a run with the message handler, which cost
/// a short script more than its own work.
struct DispatchSet<'r> {
    previous: Option<NonNull<()>>,
    _dispatch: std::marker::PhantomData<&'r mut ()>,
}

impl<'r> DispatchSet<'r> {
    fn start(dispatch: &'r mut &mut Dispatch<'_>) -> Self {
        let p = NonNull::from(dispatch).cast::<()>();
        DispatchSet {
            previous: DISPATCH.replace(Some(p)),
            _dispatch: std::marker::PhantomData,
        }
    }
}

impl Drop for DispatchSet<'_> {
    fn drop(&mut self) {
        DISPATCH.set(self.previous);
    }
}

/// Runs one command for the script running on this thread; `None` outside a run.
/// Taken while it runs, so a command that found its way back into Lua could not
/// reach the same dispatch twice.
fn dispatch_current(args: &[&[u8]], resp: Resp) -> Option<Frame> {
    /// Puts the dispatch back when the command is done, or has panicked (a
    /// coroutine may swallow the panic and the script go on).
    struct PutBack(NonNull<()>);
    impl Drop for PutBack {
        fn drop(&mut self) {
            DISPATCH.set(Some(self.0));
        }
    }
    let p = DISPATCH.take()?;
    let _put_back = PutBack(p);
    // SAFETY: `p` was made by `DispatchSet::start` from a `&mut &mut Dispatch` that
    // outlives the `DispatchSet` guard, and the guard is alive: it clears or
    // restores the slot when dropped, unwinding included. Taking the slot makes
    // this the only reference to the dispatch until it is put back.
    let dispatch = unsafe { p.cast::<&mut Dispatch<'_>>().as_mut() };
    let frame = dispatch(args, resp);
    interrupt::step_aside_if_overdue();
    Some(frame)
}

/// Elements past which turning a reply into Lua values hands the loop over
/// first: many small allocations, none of them big, and no Lua instructions.
const BIG_REPLY: usize = 16 * 1024;

/// Whether a command's reply has so many elements that turning it into Lua
/// values takes long. (Big values announce themselves: see
/// [`crate::alloc::before_big_alloc`].)
fn is_big(frame: &Frame) -> bool {
    match frame {
        Frame::Array(items) | Frame::Push(items) | Frame::Set(items) => items.len() >= BIG_REPLY,
        Frame::Integers(items) => items.len() >= BIG_REPLY,
        Frame::Map(pairs) => pairs.len() >= BIG_REPLY / 2,
        _ => false,
    }
}

/// Installs `redis.call` (`raise`: a command's error is raised) and
/// `redis.pcall` (returned as an error table) on a new state.
fn install_calls(state: &State) -> mlua::Result<()> {
    for (name, raise) in [("call", true), ("pcall", false)] {
        let f = state.lua.create_function(move |lua, args: MultiValue| {
            let resp = RESP.get();
            let frame = match command_args(&args) {
                Ok(args) => {
                    let list: SmallVec<[&[u8]; 8]> = args.iter().map(|a| a.bytes()).collect();
                    dispatch_current(&list, resp).unwrap_or_else(|| {
                        Frame::error("ERR redis.call is only available while a script runs")
                    })
                }
                Err(text) => Frame::error(text),
            };
            if is_big(&frame) {
                interrupt::step_aside();
            }
            match frame {
                Frame::Error(text) if raise => Err(mlua::Error::external(CallError(
                    String::from_utf8_lossy(&text).into_owned(),
                ))),
                frame => frame_to_lua(lua, frame, resp),
            }
        })?;
        state.redis.raw_set(name, f)?;
    }
    Ok(())
}

fn with_runtime<R>(
    scripts: &Scripts,
    f: impl FnOnce(&mut Runtime) -> Result<R, String>,
) -> Result<R, String> {
    RUNTIME.with(|cell| {
        let mut slot = cell.borrow_mut();
        let generation = scripts.generation();
        if slot.as_ref().is_none_or(|rt| rt.generation != generation) {
            let started = new_state().and_then(|state| {
                install_calls(&state)?;
                let handler = state.lua.create_function(on_error)?;
                Ok((state, handler))
            });
            let (state, handler) = started.map_err(|e| format!("ERR cannot start Lua: {e}"))?;
            *slot = Some(Runtime {
                state,
                handler,
                generation,
                functions: ahash::HashMap::default(),
                published: 0,
            });
        }
        match slot.as_mut() {
            Some(rt) => {
                let done = f(rt);
                rt.publish();
                done
            }
            None => Err("ERR cannot start Lua".into()),
        }
    })
}

impl Runtime {
    /// Compiles `script` into this state unless it is already.
    fn compile(&mut self, scripts: &Scripts, script: &Script) -> Result<(), String> {
        if self.functions.contains_key(&script.sha) {
            return Ok(());
        }
        // Bytecode fails as a syntax error, as in Redis 7 (see the sandbox).
        let code = script.code();
        let spaced;
        let code = if code.first() == Some(&0x1b) {
            spaced = [b" ", code].concat();
            &spaced[..]
        } else {
            code
        };
        let f = self
            .state
            .lua
            .load(code)
            .set_name("@user_script")
            // Lua 5.1 trusts bytecode blindly: a crafted chunk reads and writes
            // memory at will. Redis 7 refuses it; so does this.
            .set_mode(mlua::ChunkMode::Text)
            .into_function()
            .map_err(|e| {
                let msg = match e {
                    mlua::Error::SyntaxError { message, .. } => message,
                    other => other.to_string(),
                };
                format!("ERR Error compiling script (new function): {msg}")
            })?;
        // What the shared cache evicted (EVAL's LRU) is dropped here too, now
        // and then rather than on each eviction, which happens on another thread:
        // so this thread holds at most the cache plus the slack.
        if self.functions.len() >= scripts.count() + COMPILED_SLACK {
            self.functions.retain(|sha, _| scripts.contains(sha));
        }
        self.functions.insert(script.sha.clone(), f);
        Ok(())
    }
}

/// Compiles `script` on this thread (SCRIPT LOAD and EVAL check it before caching
/// it); the error is Redis's reply text.
pub fn compile(scripts: &Scripts, script: &Script) -> Result<(), String> {
    with_runtime(scripts, |rt| rt.compile(scripts, script))
}

/// Runs a script to its reply.
pub fn run(scripts: &Scripts, inv: Invocation<'_>, dispatch: &mut Dispatch<'_>) -> Frame {
    with_runtime(scripts, |rt| {
        rt.compile(scripts, inv.script)?;
        // Borrowed, not cloned: a clone of an mlua function takes a registry
        // slot of the state, and its drop gives it back.
        let f = &rt.functions[&inv.script.sha];
        run_in(&rt.state, &rt.handler, f, &inv, dispatch).map_err(|e| format!("ERR {e}"))
    })
    .unwrap_or_else(Frame::error)
}

fn run_in(
    state: &State,
    handler: &Function,
    f: &Function,
    inv: &Invocation<'_>,
    mut dispatch: &mut Dispatch<'_>,
) -> mlua::Result<Frame> {
    // A step long in one go (a string of megabytes built by `..`, `string.rep` or
    // cjson, a big value into or out of Lua) starts with a big allocation, which
    // hands the loop over first; the instruction hook sees only what is long in
    // many steps.
    let _big = crate::alloc::before_big_alloc(interrupt::step_aside);
    set_keys_and_argv(state, inv.keys, inv.argv)?;
    RESP.set(Resp::Two);
    let _entered = interrupt::enter(inv.running.clone());
    let _dispatch = DispatchSet::start(&mut dispatch);
    // `redis.call` and `redis.pcall` are Rust functions, not Lua wrappers:
    // `return redis.call(…)` is a tail call, and only a C function keeps the
    // script's frame (and so its line number) on the stack.
    let out: MultiValue = state.xpcall.call((f, handler))?;
    let mut out = out.into_iter();
    let ok = matches!(out.next(), Some(Value::Boolean(true)));
    let value = out.next().unwrap_or(Value::Nil);
    Ok(if ok {
        lua_to_frame(&value, RESP.get())
    } else {
        let killed = inv.running.killed.load(Relaxed);
        script_error(&value, &inv.script.sha, killed)
    })
}

/// Sets the globals `KEYS` and `ARGV` for a run: new tables each time, as Redis
/// makes them, since a script may change its own.
///
/// Through the C API in one protected call: mlua's `create_string` and
/// `raw_set` take and free a registry slot for every string, which cost more
/// than the rest of a short script's setup.
fn set_keys_and_argv(state: &State, keys: &[&[u8]], argv: &[&[u8]]) -> mlua::Result<()> {
    if keys.len().max(argv.len()) >= i32::MAX as usize {
        return Err(mlua::Error::runtime("too many arguments for a Lua table"));
    }
    // SAFETY: the closure runs as a C function under `lua_pcall`, with the
    // hidden globals table at stack index 1 and room for the three slots it
    // pushes at a time. mlua's allocator aborts rather than fail, and a script
    // cannot give anything a `__gc` (no `newproxy`), so nothing should raise in
    // here; were something to, the longjmp would skip frames that own nothing
    // to drop (the loop walks a borrowed array).
    unsafe {
        state.lua.exec_raw::<()>(&state.globals, |l| {
            for &(name, items) in &[(c"KEYS", keys), (c"ARGV", argv)] {
                ffi::lua_pushstring(l, name.as_ptr());
                ffi::lua_createtable(l, items.len() as i32, 0);
                for (i, item) in items.iter().enumerate() {
                    ffi::lua_pushlstring(l, item.as_ptr().cast(), item.len());
                    ffi::lua_rawseti(l, -2, i as ffi::lua_Integer + 1);
                }
                ffi::lua_rawset(l, 1);
            }
        })
    }
}

/// One argument of a `redis.call`: a Lua string's own bytes, or a number as text.
enum Arg<'v> {
    Str(BorrowedBytes<'v>),
    Number(String),
}

impl Arg<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Arg::Str(s) => s,
            Arg::Number(n) => n.as_bytes(),
        }
    }
}

/// `redis.call`'s arguments as a command: strings, or numbers as Lua prints them.
/// The strings are read where Lua keeps them; a command copies what it stores.
fn command_args(args: &MultiValue) -> Result<SmallVec<[Arg<'_>; 8]>, String> {
    if args.is_empty() {
        return Err("ERR Please specify at least one argument for this redis lib call".into());
    }
    args.iter()
        .map(|v| match v {
            Value::String(s) => Ok(Arg::Str(s.as_bytes())),
            Value::Integer(n) => Ok(Arg::Number(number_arg(*n as f64))),
            Value::Number(n) => Ok(Arg::Number(number_arg(*n))),
            _ => Err(String::new()),
        })
        .collect::<Result<_, _>>()
        .map_err(|_| "ERR Lua redis lib command arguments must be strings or integers".into())
}

/// A Lua number as a command argument, as Redis 7.4 writes it: an integral value
/// that fits comfortably in an i64 as an integer (so `redis.call('incrby', k,
/// 1e9)` gets `1000000000`, not `1e+09`), anything else as the shortest text that
/// reads back as the same double, in `fpconv_dtoa`'s layout.
fn number_arg(d: f64) -> String {
    const HALF: f64 = (i64::MAX / 2) as f64;
    if (-HALF..=HALF).contains(&d) && d == (d as i64) as f64 {
        return (d as i64).to_string();
    }
    if !d.is_finite() {
        return if d.is_nan() {
            "nan"
        } else if d > 0.0 {
            "inf"
        } else {
            "-inf"
        }
        .into();
    }
    // Shortest round-trip digits and their decimal exponent, from ryu's text.
    let text = ryu::Buffer::new().format_finite(d.abs()).to_string();
    let (mantissa, exp10) = match text.split_once('e') {
        Some((m, e)) => (m.to_string(), e.parse::<i32>().unwrap_or(0)),
        None => (text.clone(), 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((&mantissa, ""));
    let frac = frac.trim_end_matches('0');
    let all = format!("{int}{frac}");
    let lead = all.len() - all.trim_start_matches('0').len();
    let digits = all.trim_start_matches('0');
    // The value is 0.`digits` × 10^point.
    let point = int.len() as i32 - lead as i32 + exp10;
    let n = digits.len() as i32;
    // `K` as fpconv has it: the value is digits × 10^K.
    let k = point - n;
    let exp = (k + n - 1).abs();
    let sign = if d < 0.0 { "-" } else { "" };
    if k >= 0 && exp < n + 7 {
        return format!("{sign}{digits}{}", "0".repeat(k as usize));
    }
    if k < 0 && (k > -7 || exp < 4) {
        let offset = n + k;
        return if offset <= 0 {
            format!("{sign}0.{}{digits}", "0".repeat((-offset) as usize))
        } else {
            let (a, b) = digits.split_at(offset as usize);
            format!("{sign}{a}.{b}")
        };
    }
    let digits = &digits[..digits.len().min(18 - usize::from(d < 0.0))];
    let (first, rest) = digits.split_at(1);
    let dot = if rest.is_empty() { "" } else { "." };
    let esign = if k + n - 1 < 0 { '-' } else { '+' };
    format!("{sign}{first}{dot}{rest}e{esign}{exp}")
}

/// The message handler: any error becomes `{err=…, source=…, line=…}`, the line
/// being the innermost one of the script's own code.
fn on_error(lua: &Lua, err: Value) -> mlua::Result<Table> {
    let t = match error_table(lua, err)? {
        Value::Table(t) => t,
        other => {
            let msg = match other {
                Value::Nil => "nil".to_string(),
                Value::Boolean(b) => b.to_string(),
                Value::Error(e) => e.to_string(),
                v => match lua.coerce_string(v.clone())? {
                    Some(s) => s.to_string_lossy(),
                    None => v.type_name().to_string(),
                },
            };
            let t = lua.create_table()?;
            t.raw_set("err", format!("ERR {msg}"))?;
            t
        }
    };
    for level in 1..200 {
        let Some(frame) = lua.inspect_stack(level) else {
            break;
        };
        if frame.source().source.as_deref() == Some("@user_script") {
            t.raw_set("source", "@user_script")?;
            t.raw_set("line", frame.curr_line())?;
            break;
        }
    }
    Ok(t)
}

/// Redis's reply for a script that raised an error.
/// A killed script gets SCRIPT KILL's text whatever error the hook surfaced as.
fn script_error(err: &Value, sha: &str, killed: bool) -> Frame {
    let Value::Table(t) = err else {
        return Frame::error(format!("ERR Error running script script: {sha}"));
    };
    let msg = match t.raw_get::<Value>("err") {
        _ if killed => KILLED.to_string(),
        Ok(Value::String(s)) => s.to_string_lossy(),
        _ => "ERR unknown error".into(),
    };
    match (t.raw_get::<String>("source"), t.raw_get::<i64>("line")) {
        (Ok(source), Ok(line)) => Frame::error(format!("{msg} script: {sha}, on {source}:{line}.")),
        _ => Frame::error(format!("{msg} script: {sha}")),
    }
}

#[cfg(test)]
mod tests {
    use super::number_arg;

    #[test]
    fn numbers_become_arguments_as_redis_7_4_writes_them() {
        // Integral values as integers (7.2 sent `1e+09`, which INCRBY refuses).
        assert_eq!(number_arg(1e9), "1000000000");
        assert_eq!(number_arg(200000000.0), "200000000");
        assert_eq!(number_arg(-3.0), "-3");
        assert_eq!(number_arg(123456789012345.0), "123456789012345");
        // Others as fpconv_dtoa's shortest text.
        assert_eq!(number_arg(0.1), "0.1");
        assert_eq!(number_arg(1.5), "1.5");
        assert_eq!(number_arg(-2.25), "-2.25");
        assert_eq!(number_arg(1.0 / 3.0), "0.3333333333333333");
        assert_eq!(number_arg(0.000001), "0.000001");
        assert_eq!(number_arg(1e-7), "1e-7");
        assert_eq!(number_arg(1.5e-10), "1.5e-10");
        assert_eq!(number_arg(1e20), "1e+20");
        assert_eq!(number_arg(1e300), "1e+300");
        assert_eq!(number_arg(-1.25e100), "-1.25e+100");
        assert_eq!(number_arg(f64::INFINITY), "inf");
    }
}
