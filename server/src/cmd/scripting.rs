//! EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT: Lua scripting.
//!
//! The Lua side (cache, sandbox, conversions) is `crate::script`; this family
//! parses the commands, locks the script's keys and runs its `redis.call`s
//! through the normal dispatch ([`run`]), exactly as EXEC runs queued commands.
//!
//! **Atomicity on a sharded keyspace.** A script locks the shards of the keys it
//! declares (KEYS) for its whole run, exclusively unless it is read-only
//! (EVAL_RO, `#!lua flags=no-writes`): no other command on those keys can
//! interleave, while commands on other shards go on. So a script may only touch
//! declared keys: anything else is refused, which is Redis's own rule for
//! cluster-safe scripts. A script that must reach undeclared keys says
//! `#!lua flags=allow-undeclared-keys` (or the server sets
//! `lua-allow-undeclared-keys yes`) and then locks every shard, like Redis's
//! global lock. Inside MULTI the script runs under the transaction's locks, which
//! cover its KEYS only, so undeclared keys are refused there whatever the flags.

use std::borrow::Cow;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use relcache_protocol::resp::{Frame, Protocol};

use super::spec::{self, CommandSpec, Group, Keys};
use super::{eq_ic, parse_i64, registry, resolve, run, Argv, Ctx, Outcome, Start, ViewSlot};
use crate::db::{LockMode, View};
use crate::error::{CmdError, CmdResult};
use crate::script::convert::Resp;
use crate::script::runtime::{self, Invocation};
use crate::script::{Held, Holder, Kill, Origin, Running, Script};
use crate::server::Server;
use crate::session::Session;

const EVAL_FLAGS: u32 =
    spec::NOSCRIPT | spec::STALE | spec::SKIP_MONITOR | spec::NO_MANDATORY_KEYS | spec::RUNS_SCRIPT;
const SCRIPT_KEYS: Keys = Keys::Counted { at: 2 };
const EVAL_COMPLEXITY: &str = "Depends on the script that is executed.";

pub(super) const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "eval",
        arity: -3,
        // LOCK_WRITE: inside EXEC the transaction must lock the script's keys
        // exclusively, as the script may write.
        flags: EVAL_FLAGS | spec::LOCK_WRITE,
        keys: SCRIPT_KEYS,
        group: Group::Scripting,
        since: "2.6.0",
        summary: "Executes a server-side Lua script.",
        complexity: EVAL_COMPLEXITY,
        handler: eval,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "evalsha",
        arity: -3,
        flags: EVAL_FLAGS | spec::LOCK_WRITE,
        keys: SCRIPT_KEYS,
        group: Group::Scripting,
        since: "2.6.0",
        summary: "Executes a server-side Lua script by SHA1 digest.",
        complexity: EVAL_COMPLEXITY,
        handler: evalsha,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "eval_ro",
        arity: -3,
        flags: spec::READONLY | EVAL_FLAGS,
        keys: SCRIPT_KEYS,
        group: Group::Scripting,
        since: "7.0.0",
        summary: "Executes a read-only server-side Lua script.",
        complexity: EVAL_COMPLEXITY,
        handler: eval_ro,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "evalsha_ro",
        arity: -3,
        flags: spec::READONLY | EVAL_FLAGS,
        keys: SCRIPT_KEYS,
        group: Group::Scripting,
        since: "7.0.0",
        summary: "Executes a read-only server-side Lua script by SHA1 digest.",
        complexity: EVAL_COMPLEXITY,
        handler: evalsha_ro,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "script",
        arity: -2,
        group: Group::Scripting,
        since: "2.6.0",
        summary: "A container for Lua scripts management commands.",
        complexity: "Depends on subcommand.",
        subcommands: SCRIPT_SUBCOMMANDS,
        ..CommandSpec::DEFAULT
    },
];

const SCRIPT_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "script|exists",
        arity: -3,
        flags: spec::NOSCRIPT,
        group: Group::Scripting,
        since: "2.6.0",
        summary: "Determines whether server-side Lua scripts exist in the script cache.",
        complexity: "O(N) with N being the number of scripts to check (so checking a single script is an O(1) operation).",
        handler: script_exists,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "script|flush",
        arity: -2,
        flags: spec::NOSCRIPT,
        group: Group::Scripting,
        since: "2.6.0",
        summary: "Removes all server-side Lua scripts from the script cache.",
        complexity: "O(N) with N being the number of scripts in cache",
        handler: script_flush,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "script|help",
        arity: 2,
        flags: spec::LOADING | spec::STALE,
        group: Group::Scripting,
        since: "5.0.0",
        summary: "Returns helpful text about the different subcommands.",
        handler: script_help,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "script|kill",
        arity: 2,
        flags: spec::NOSCRIPT | spec::ALLOW_BUSY,
        group: Group::Scripting,
        since: "2.6.0",
        summary: "Terminates a server-side Lua script during execution.",
        handler: script_kill,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "script|load",
        arity: 3,
        flags: spec::NOSCRIPT | spec::STALE,
        group: Group::Scripting,
        since: "2.6.0",
        summary: "Loads a server-side Lua script to the script cache.",
        complexity: "O(N) with N being the length in bytes of the script body.",
        handler: script_load,
        ..CommandSpec::DEFAULT
    },
];

fn eval(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let script = cached(ctx.server, args[1], Origin::Eval, ctx.oom_at_start())?;
    eval_generic(ctx, args, &script, false)
}

fn evalsha(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let script = by_sha(ctx.server, args[1])?;
    eval_generic(ctx, args, &script, false)
}

fn eval_ro(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let script = cached(ctx.server, args[1], Origin::Eval, ctx.oom_at_start())?;
    eval_generic(ctx, args, &script, true)
}

fn evalsha_ro(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let script = by_sha(ctx.server, args[1])?;
    eval_generic(ctx, args, &script, true)
}

/// The script with this body, compiled and cached (EVAL caches what it runs, as
/// Redis does, so EVALSHA finds it afterwards; see [`Origin`] for how long).
/// `oom`: memory is over with nothing left to evict, which refuses a script
/// with flags before it is compiled ([`refused_for_memory`]).
fn cached(
    server: &Server,
    body: &[u8],
    origin: Origin,
    oom: bool,
) -> Result<Arc<Script>, CmdError> {
    // Cached means compiled once without error, so it compiles here too when it
    // first runs on this thread.
    if let Some(s) = crate::script::with_body_sha(body, |sha| server.scripts.get(sha)) {
        if origin == Origin::Load {
            // Kept from now on if EVAL cached it (see `Scripts::insert`).
            server.scripts.insert(s.clone(), origin);
        }
        return Ok(s);
    }
    // Cached for good: a copy, not a slice of the read buffer it arrived in.
    let script = Script::new(Bytes::copy_from_slice(body)).map_err(CmdError::Err)?;
    refused_for_memory(&script, oom)?;
    runtime::compile(&server.scripts, &script).map_err(CmdError::Coded)?;
    let (script, evicted) = server.scripts.insert(Arc::new(script), origin);
    if evicted > 0 {
        server.stats.evicted_scripts.add(evicted);
    }
    Ok(script)
}

/// A script that declares flags, and neither `no-writes` nor `allow-oom`, is
/// refused whole while memory is over with nothing left to evict, before its
/// arguments are looked at, as Redis refuses it (such a script is a deny-oom
/// command there); one without flags only at its first write
/// ([`Rules::refuse_oom`]).
fn refused_for_memory(script: &Script, oom: bool) -> Result<(), CmdError> {
    let flags = &script.flags;
    if oom && flags.shebang && !flags.no_writes && !flags.allow_oom {
        return Err(CmdError::Oom);
    }
    Ok(())
}

fn by_sha(server: &Server, sha: &[u8]) -> Result<Arc<Script>, CmdError> {
    // Names are lower-case hex, and clients send them so: no copy for those.
    let sha = match std::str::from_utf8(sha) {
        Ok(s) if !s.bytes().any(|b| b.is_ascii_uppercase()) => Cow::Borrowed(s),
        _ => Cow::Owned(String::from_utf8_lossy(sha).to_ascii_lowercase()),
    };
    server
        .scripts
        .get(&sha)
        .ok_or_else(|| CmdError::Coded("NOSCRIPT No matching script. Please use EVAL.".into()))
}

/// What a script may do, decided before it runs.
struct Rules<'k> {
    read_only: bool,
    /// Its writes that may add data are refused until it has written: memory
    /// was over `maxmemory` with nothing left to evict when it started
    /// ([`Ctx::oom_at_start`]), and it did not say `allow-oom`.
    refuse_oom: bool,
    /// The declared keys; `None` when any key may be touched (every shard is held).
    declared: Option<&'k [&'k [u8]]>,
}

fn eval_generic(ctx: &mut Ctx<'_, '_>, args: &[&[u8]], script: &Script, ro: bool) -> CmdResult {
    let oom = ctx.oom_at_start();
    refused_for_memory(script, oom)?;
    let numkeys = parse_i64(args[2])?;
    if numkeys < 0 {
        return Err(CmdError::err("Number of keys can't be negative"));
    }
    if numkeys as u64 > (args.len() - 3) as u64 {
        return Err(CmdError::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    let (keys, argv) = args[3..].split_at(numkeys as usize);
    let server = ctx.server;
    if script.flags.no_cluster && server.cluster.enabled() {
        return Err(CmdError::err(
            "Can not run script on cluster, 'no-cluster' flag is set.",
        ));
    }
    let in_exec = ctx.in_exec();
    // A view given to the script holds its declared keys' shards and no others:
    // EXEC's, or the one a key of a slot being moved was looked for under
    // (`run_moving`). Its keys are all the script may touch.
    let given_view = !matches!(ctx.view, ViewSlot::Unlocked);
    let undeclared = !given_view
        && (script.flags.allow_undeclared_keys
            || server.config.lua_allow_undeclared_keys.load(Relaxed));
    let rules = Rules {
        read_only: ro || script.flags.no_writes,
        refuse_oom: oom && !script.flags.allow_oom,
        declared: (!undeclared).then_some(keys),
    };
    let mode = if rules.read_only {
        LockMode::Read
    } else {
        LockMode::Write
    };
    let shards = (!undeclared).then(|| {
        let mut s: Vec<usize> = keys.iter().map(|k| server.db.shard_index(k)).collect();
        s.sort_unstable();
        s.dedup();
        s
    });
    // Registered before its shards are locked: a command that finds them taken
    // then waits (in place for a script just started, else parked), or hears
    // BUSY, instead of queueing on the lock.
    let threshold = Duration::from_millis(server.config.busy_reply_threshold.load(Relaxed));
    // The shards scripts wait for, counted toward moving the connection to the
    // loop they call home (`script::affinity`): once a script, not again as it
    // runs again after a park, and not in EXEC or under given locks, where
    // none waits.
    let counts = !given_view && ctx.resumed().is_none();
    // Inside EXEC nothing may wait (the transaction holds its locks); EXEC
    // waited for these shards, so this is a script that started since. Nor may
    // one given locks wait in place: the script it waits for may wait for them.
    let registered =
        match server
            .scripts
            .running
            .try_start(ctx.session.id(), shards, threshold, !given_view)
        {
            Ok(registered) => {
                if counts {
                    ctx.session.affinity.note(registered.waited_on);
                }
                registered
            }
            Err(Held {
                standing: Holder::Running { busy_at },
                wake,
                shard,
                ..
            }) if !in_exec => {
                if counts {
                    ctx.session.affinity.note(shard);
                }
                ctx.park(super::script_wait(wake, busy_at));
                return Ok(Frame::Null);
            }
            Err(_) => return Err(CmdError::Busy),
        };
    let running = &registered.running;
    let session = &mut *ctx.session;
    // Never locked again if given: the thread holds those locks already, and
    // taking one twice would wait for itself forever.
    let given = match &mut ctx.view {
        ViewSlot::Exec(v) => Some(&mut **v),
        ViewSlot::Own(v) => Some(v),
        ViewSlot::Unlocked => None,
    };
    let mut own = None;
    // Run in place: most scripts take microseconds, less than handing the loop to
    // another thread would cost. One that runs long hands it over from its
    // instruction hook (`script::interrupt`), and its shards, if they must be
    // waited for, are waited for off the loop by the view's own locking.
    let reply = {
        let view: &mut View<'_> = match given {
            Some(v) => v,
            None => own.insert({
                let mut v = server.db.view(keys, undeclared, mode);
                v.set_client(session.id());
                v
            }),
        };
        let inv = Invocation {
            script,
            keys,
            argv,
            running: running.clone(),
        };
        // The arguments are the script's strings, borrowed: a command copies what
        // it stores.
        let mut dispatch = |cmd: &[&[u8]], resp: Resp| {
            let cmd = Argv::new(cmd, &[]);
            call(server, session, view, &rules, running, cmd, resp)
        };
        runtime::run(&server.scripts, inv, &mut dispatch)
    };
    // A given view's stats are its owner's to take.
    if let Some(view) = own {
        server.absorb_view_stats(&view);
    }
    // Only once its locks are gone, so that whoever it wakes finds its shards
    // free (a given view's go with the command, a moment later).
    drop(registered);
    Ok(reply)
}

/// One `redis.call` from a script: checked against what scripts may do, then run
/// through the normal dispatch under the script's locks.
fn call<'a>(
    server: &'a Server,
    session: &mut Session,
    view: &mut View<'a>,
    rules: &Rules<'_>,
    running: &Running,
    args: Argv<'_>,
    resp: Resp,
) -> Frame {
    let (id, spec) = match resolve(registry(), &args) {
        Ok(found) => found,
        Err(CmdError::WrongArity(_)) => {
            return Frame::error("ERR Wrong number of args calling Redis command from script")
        }
        Err(CmdError::UnknownSubcommand { .. }) | Err(_)
            if registry().command(args[0]).is_none() =>
        {
            return Frame::error("ERR Unknown Redis command called from script")
        }
        Err(e) => return e.to_frame(),
    };
    if spec.has(spec::NOSCRIPT) || spec.has(spec::BLOCKING) {
        return Frame::error("ERR This Redis command is not allowed from script");
    }
    if spec.has(spec::WRITE) {
        if rules.read_only {
            return Frame::error("ERR Write commands are not allowed from read-only scripts.");
        }
        // Only until it has written: stopping it half-way would do more harm
        // than the memory.
        if spec.has(spec::DENYOOM) && rules.refuse_oom && !running.wrote.load(Relaxed) {
            return CmdError::Oom.to_frame();
        }
    }
    if let Some(declared) = rules.declared {
        let undeclared = match spec.key_indices(&args) {
            None => Some("the whole keyspace".to_string()),
            Some(idx) => idx
                .iter()
                .map(|&i| args[i])
                .find(|k| !declared.contains(k))
                .map(|k| format!("key '{}'", String::from_utf8_lossy(k))),
        };
        if let Some(what) = undeclared {
            return Frame::error(format!(
                "ERR Script attempted to access {what}, which it did not declare in KEYS (declare it, or use #!lua flags=allow-undeclared-keys)"
            ));
        }
    }
    if spec.has(spec::WRITE) {
        running.wrote.store(true, Relaxed);
    }
    // The command replies in the protocol the script chose (`redis.setresp`).
    let proto = std::mem::replace(
        &mut session.proto,
        match resp {
            Resp::Two => Protocol::Resp2,
            Resp::Three => Protocol::Resp3,
        },
    );
    let outcome = run(
        server,
        session,
        id,
        spec,
        args,
        Some(view),
        Start::default(),
    );
    session.proto = proto;
    match outcome {
        Outcome::Reply(frame) => frame,
        // Only SUBSCRIBE and its kin answer more than once, and they are noscript.
        Outcome::Replies(mut frames) => frames.pop().unwrap_or(Frame::Null),
        // QUIT and SHUTDOWN are refused above (noscript); a CLIENT KILL of this
        // very client answers, and the script goes on as Redis's does.
        Outcome::Close(frame) => frame.unwrap_or(Frame::Null),
        // Nothing parks under a held view: lease commands answer busy instead.
        Outcome::Park(_) => Frame::Null,
        Outcome::Written => unreachable!("a script's command has no output to write into"),
    }
}

fn script_load(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let script = cached(ctx.server, args[2], Origin::Load, false)?;
    Ok(Frame::Bulk(Bytes::from(script.sha.clone())))
}

fn script_exists(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let found = args[2..]
        .iter()
        .map(|sha| {
            let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
            Frame::Integer(i64::from(ctx.server.scripts.contains(&sha)))
        })
        .collect();
    Ok(Frame::Array(found))
}

fn script_flush(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    match &args[2..] {
        [] => {}
        [mode] if eq_ic(mode, "ASYNC") || eq_ic(mode, "SYNC") => {}
        _ => return Err(CmdError::err("SCRIPT FLUSH only support SYNC|ASYNC option")),
    }
    // Both modes free at once: the cache is small next to the keyspace.
    ctx.server.scripts.flush();
    Ok(Frame::ok())
}

fn script_kill(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    match ctx.server.scripts.running.kill() {
        Kill::Killed => Ok(Frame::ok()),
        Kill::NotBusy => Err(CmdError::Coded("NOTBUSY No scripts in execution right now.".into())),
        Kill::Unkillable => Err(CmdError::Coded(
            "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.".into(),
        )),
    }
}

fn script_help(_: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    let lines = [
        "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "EXISTS <sha1> [<sha1> ...]",
        "    Return information about the existence of the scripts in the script cache.",
        "FLUSH [ASYNC|SYNC]",
        "    Flush the Lua scripts cache. Very dangerous on replicas.",
        "    When called without the optional mode argument, the behavior is determined by the",
        "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
        "    * ASYNC: Asynchronously flush the scripts cache.",
        "    * SYNC: Synchronously flush the scripts cache.",
        "KILL",
        "    Kill the currently executing Lua script.",
        "LOAD <script>",
        "    Load a script into the scripts cache without executing it.",
        "HELP",
        "    Prints this help.",
    ];
    Ok(Frame::Array(
        lines
            .iter()
            .map(|l| Frame::Simple(Bytes::from_static(l.as_bytes())))
            .collect(),
    ))
}
