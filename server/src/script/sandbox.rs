//! The Lua state a script runs in, shut in as Redis 7 shuts it in.
//!
//! Only the base library (less `dofile`, `loadfile`, `print`, `setfenv`, `getfenv`,
//! `newproxy`, `module`, `require`), `table`, `string`, `math`, `coroutine`,
//! Redis's `redis`, `cjson` and `bit`, and of `os` only `os.clock` (as Redis 7.4):
//! no `io`, `package`, `debug` or the rest of `os`, so no file, process or network
//! access. Redis 7 patches Lua to make tables read-only;
//! stock Lua 5.1 cannot, so the same effect comes from proxies: the global table
//! is empty and reads through to a hidden one, and every library table is a proxy
//! over the real one, so any assignment (a new global, `string.x = …`,
//! `redis = nil`) goes through `__newindex` and fails with Redis's text, and
//! `rawset` refuses the proxies. Reading a global that does not exist fails too.

use mlua::{Function, Lua, LuaOptions, StdLib, Table, Value};

use super::{interrupt, libs};

/// Runs once per Lua state. `...` is the real `redis` table (the runtime puts
/// `call` and `pcall` in it), the function that records the protocol
/// `redis.setresp` chose, the `cjson` and `bit` tables, the function that turns
/// a failed `redis.call` caught by `pcall` into its error text (as Redis 7 hands
/// it), whether the script was killed, and `os`.
const PRELUDE: &str = r#"
local redis, set_resp, cjson, bit, error_text, killed, os = ...
local pairs, ipairs, error, type, tostring = pairs, ipairs, error, type, tostring
local pcall, xpcall, loadstring, load = pcall, xpcall, loadstring, load
local concat = table.concat
local KILLED = 'ERR Script killed by user with SCRIPT KILL...'
local rawset, setmetatable, getmetatable = rawset, setmetatable, getmetatable
local G = _G
local hidden = {}
for k, v in pairs(G) do hidden[k] = v end
for k in pairs(hidden) do rawset(G, k, nil) end
for _, name in ipairs({'dofile', 'loadfile', 'print', 'setfenv', 'getfenv',
                       'newproxy', 'module', 'require'}) do
  hidden[name] = nil
end

local readonly = setmetatable({}, {__mode = 'k'})
local function refuse() error('Attempt to modify a readonly table', 2) end
local function protect(t)
  local p = {}
  readonly[p] = true
  return setmetatable(p, {__index = t, __newindex = refuse, __metatable = false})
end

-- A script's `pcall(redis.call, …)` catches the failed command's error text,
-- as in Redis.
local function caught(ok, ...)
  if ok then return ok, ... end
  if killed() then error(KILLED, 0) end
  return false, error_text((...))
end
hidden.pcall = function(f, ...) return caught(pcall(f, ...)) end
-- SCRIPT KILL's error cannot be caught: whatever catches one raises it again.
local function rekill(ok, ...)
  if not ok and killed() then error(KILLED, 0) end
  return ok, ...
end
-- The kill is raised from the count hook, and Lua 5.1 runs the error handler
-- of an xpcall before unwinding, with hooks off: a handler of the script's own
-- must not run then, or a loop in it could never be stopped.
hidden.xpcall = function(f, handler)
  return rekill(xpcall(f, function(e)
    if killed() then return e end
    return handler(e)
  end))
end
local resume = hidden.coroutine.resume
hidden.coroutine.resume = function(co, ...) return rekill(resume(co, ...)) end
-- Source text only. Lua 5.1 runs bytecode unverified (a crafted chunk reads
-- and writes memory at will); Redis 7 parses every chunk as text, so bytecode
-- fails as a syntax error. The leading space makes the parser say the same.
hidden.loadstring = function(s, name)
  if type(s) == 'string' and s:byte(1) == 27 then return loadstring(' ' .. s, name or s) end
  return loadstring(s, name)
end
hidden.load = function(reader, name)
  if type(reader) ~= 'function' then return load(reader, name) end
  local parts = {}
  while true do
    local piece = reader()
    if piece == nil or piece == '' then break end
    if type(piece) ~= 'string' then return nil, 'reader function must return a string' end
    parts[#parts + 1] = piece
  end
  return hidden.loadstring(concat(parts), name or '=(load)')
end
redis.setresp = function(n)
  if n ~= 2 and n ~= 3 then error({err = 'ERR RESP version must be 2 or 3.'}, 0) end
  set_resp(n)
end
redis.error_reply = function(s)
  if type(s) ~= 'string' then error({err = 'ERR wrong number or type of arguments'}, 0) end
  if s:sub(1, 1) == '-' then s = s:sub(2) end
  return {err = s}
end
redis.status_reply = function(s)
  if type(s) ~= 'string' then error({err = 'ERR wrong number or type of arguments'}, 0) end
  return {ok = s}
end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
-- Effects replication is the only kind since Redis 7: these are no-ops.
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
redis.replicate_commands = function() return true end
redis.set_repl = function() end

hidden.redis = protect(redis)
hidden.cjson = protect(cjson)
hidden.bit = protect(bit)
hidden.os = protect(os)
for _, name in ipairs({'string', 'table', 'math', 'coroutine'}) do
  hidden[name] = protect(hidden[name])
end
-- `("x"):rep(2)` reaches the real string table through strings' metatable:
-- hide it so it cannot be changed that way.
getmetatable('').__metatable = false
hidden.rawset = function(t, k, v)
  if readonly[t] then error('Attempt to modify a readonly table', 0) end
  return rawset(t, k, v)
end
hidden._G = G
readonly[G] = true
setmetatable(G, {
  __index = function(_, k)
    local v = hidden[k]
    if v == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
    end
    return v
  end,
  __newindex = refuse,
  __metatable = false,
})
return hidden, xpcall
"#;

/// A sandboxed state and the handles the runtime needs into it.
pub(super) struct State {
    pub lua: Lua,
    /// The hidden global table (`KEYS` and `ARGV` are set here for each run).
    pub globals: Table,
    /// The real `redis` table, where the runtime puts `call` and `pcall`.
    pub redis: Table,
    pub xpcall: Function,
}

pub(super) fn new_state() -> mlua::Result<State> {
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH,
        LuaOptions::new(),
    )?;
    let redis = lua.create_table()?;
    redis.raw_set("REDIS_VERSION", crate::REDIS_VERSION)?;
    redis.raw_set("REDIS_VERSION_NUM", version_num(crate::REDIS_VERSION))?;
    redis.raw_set(
        "sha1hex",
        lua.create_function(|_, s: mlua::String| Ok(super::sha1_hex(&s.as_bytes())))?,
    )?;
    redis.raw_set("log", lua.create_function(log)?)?;
    let (globals, xpcall): (Table, Function) = lua.load(PRELUDE).set_name("=relcache").call((
        redis.clone(),
        lua.create_function(|_, n: i64| {
            super::runtime::choose_resp(n);
            Ok(())
        })?,
        libs::cjson(&lua)?,
        libs::bit(&lua)?,
        lua.create_function(|lua, e: Value| {
            Ok(match &e {
                Value::Error(err) => match call_error(err) {
                    Some(text) => Value::String(lua.create_string(text)?),
                    None => e,
                },
                _ => e,
            })
        })?,
        lua.create_function(|_, ()| Ok(interrupt::killed()))?,
        os_table(&lua)?,
    ))?;
    interrupt::install(&lua)?;
    Ok(State {
        lua,
        globals,
        redis,
        xpcall,
    })
}

/// Redis 7.4's `os`: `clock` alone. Redis answers the process's CPU time; a
/// script here runs on one worker thread while others serve other clients, so
/// `os.clock()` is that thread's CPU time, in seconds, which is what a script
/// timing itself wants to see.
fn os_table(lua: &Lua) -> mlua::Result<Table> {
    let os = lua.create_table()?;
    os.raw_set("clock", lua.create_function(|_, ()| Ok(thread_cpu_secs()))?)?;
    Ok(os)
}

fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// The error `redis.call` raises for a failed command: its reply's text. Raised
/// from Rust (so the script's frame stays on the stack for the line number), it
/// reaches Lua as an opaque error value, which [`error_table`] turns back into
/// Redis's `{err=…}`.
#[derive(Debug)]
pub(super) struct CallError(pub String);

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CallError {}

/// The text of a [`CallError`] inside an mlua error, if that is what it is.
pub(super) fn call_error(e: &mlua::Error) -> Option<&str> {
    match e {
        mlua::Error::CallbackError { cause, .. } => call_error(cause),
        mlua::Error::ExternalError(inner) => inner.downcast_ref::<CallError>().map(|c| &c.0[..]),
        _ => None,
    }
}

/// A failed `redis.call` as `{err=…}`; any other error value unchanged.
pub(super) fn error_table(lua: &Lua, e: Value) -> mlua::Result<Value> {
    if let Value::Error(err) = &e {
        if let Some(text) = call_error(err) {
            let t = lua.create_table()?;
            t.raw_set("err", text)?;
            return Ok(Value::Table(t));
        }
    }
    Ok(e)
}

/// `7.4.0` as Redis's `0x070400`.
fn version_num(v: &str) -> i64 {
    v.split('.')
        .take(3)
        .fold(0, |n, part| (n << 8) | part.parse::<i64>().unwrap_or(0))
}

/// `redis.log(level, message…)`: to the server's log at the matching level.
fn log(lua: &Lua, args: mlua::MultiValue) -> mlua::Result<()> {
    let mut args = args.into_iter();
    let level = match args.next() {
        Some(Value::Integer(n)) => n,
        Some(Value::Number(n)) => n as i64,
        _ => {
            return Err(mlua::Error::runtime(
                "First argument must be a number (log level).",
            ))
        }
    };
    let mut msg = String::new();
    for (i, a) in args.enumerate() {
        if i > 0 {
            msg.push(' ');
        }
        if let Some(s) = lua.coerce_string(a)? {
            msg.push_str(&s.to_string_lossy());
        }
    }
    match level {
        0 => tracing::debug!(target: "script", "{msg}"),
        1 => tracing::info!(target: "script", "{msg}"),
        2 => tracing::info!(target: "script", "{msg}"),
        3 => tracing::warn!(target: "script", "{msg}"),
        _ => return Err(mlua::Error::runtime("Invalid log level.")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(state: &State, code: &str) -> mlua::Result<Value> {
        state.lua.load(code).set_name("@user_script").eval()
    }

    #[test]
    fn dangerous_libraries_are_absent_and_globals_protected() {
        let s = new_state().unwrap();
        for name in [
            "io", "require", "dofile", "loadfile", "debug", "package", "print",
        ] {
            let e = eval(&s, &format!("return {name}")).unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "Script attempted to access nonexistent global variable '{name}'"
                )),
                "{name}: {e}"
            );
        }
        let e = eval(&s, "x = 1").unwrap_err().to_string();
        assert!(
            e.contains("user_script:1: Attempt to modify a readonly table"),
            "{e}"
        );
        for code in [
            "string.x = 1",
            "redis = nil",
            "rawset(_G, 'x', 1)",
            "_G.y = 2",
        ] {
            let e = eval(&s, code).unwrap_err().to_string();
            assert!(
                e.contains("Attempt to modify a readonly table"),
                "{code}: {e}"
            );
        }
        assert!(eval(&s, "local t = {} t.x = 1 return t.x").is_ok());
        // Of `os`, Redis 7.4 exposes `clock` alone, read-only.
        for name in [
            "execute", "exit", "getenv", "remove", "rename", "time", "date",
        ] {
            let v = eval(&s, &format!("return os.{name}")).unwrap();
            assert!(matches!(v, Value::Nil), "os.{name} is reachable");
        }
        let e = eval(&s, "os.clock = nil").unwrap_err().to_string();
        assert!(e.contains("Attempt to modify a readonly table"), "{e}");
        let spin = "local t0 = os.clock() local x = 0 \
                    for i = 1, 3000000 do x = x + i end return os.clock() - t0";
        let Value::Number(spent) = eval(&s, spin).unwrap() else {
            panic!("os.clock() is not a number");
        };
        assert!(spent > 0.0 && spent < 60.0, "{spent}");
        assert_eq!(version_num("7.0.15"), 0x07000f);
    }
}
