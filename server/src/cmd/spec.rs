//! Command metadata: arity, flags, key positions, docs.
//!
//! The same table drives dispatch (arity and auth checks, which shards to lock and
//! how), `COMMAND INFO/DOCS/GETKEYS` (so cluster-aware clients and redis-cli hints
//! work), and `INFO commandstats`.

use super::Ctx;
use crate::error::CmdResult;

/// A command handler: runs with the command's arguments (`args[0]` is the name).
pub type Handler = fn(&mut Ctx<'_, '_>, &[&[u8]]) -> CmdResult;

// Flags, as COMMAND INFO reports them.
pub const WRITE: u32 = 1 << 0;
pub const READONLY: u32 = 1 << 1;
pub const DENYOOM: u32 = 1 << 2;
pub const ADMIN: u32 = 1 << 3;
pub const NOSCRIPT: u32 = 1 << 4;
pub const LOADING: u32 = 1 << 5;
pub const STALE: u32 = 1 << 6;
pub const FAST: u32 = 1 << 7;
pub const NO_AUTH: u32 = 1 << 8;
pub const NO_MULTI: u32 = 1 << 9;
pub const ALLOW_BUSY: u32 = 1 << 10;
pub const SKIP_SLOWLOG: u32 = 1 << 11;
pub const MOVABLE_KEYS: u32 = 1 << 12;
pub const BLOCKING: u32 = 1 << 13;
pub const SKIP_MONITOR: u32 = 1 << 14;
pub const NO_MANDATORY_KEYS: u32 = 1 << 15;
pub const PUBSUB: u32 = 1 << 16;
/// Behaves as if the client had sent ASKING first (RESTORE-ASKING): in cluster
/// mode, runs on a slot being imported instead of answering a redirection.
pub const ASKING: u32 = 1 << 17;
/// Internal, not reported as a flag: a keyspace command in the `@dangerous` ACL
/// category although not an admin one (RESTORE, RESTORE-ASKING, MIGRATE). Its
/// categories are `@keyspace` and `@dangerous` whatever its documented group
/// (Redis documents RESTORE-ASKING under `server`).
pub const DANGEROUS: u32 = 1 << 27;
/// Internal, not reported: lock the key's shards exclusively although the command
/// does not write data (WATCH registers itself in the shard).
pub const LOCK_WRITE: u32 = 1 << 31;
/// Internal: runs at once inside MULTI instead of being queued (EXEC, DISCARD,
/// MULTI, WATCH, QUIT, RESET).
pub const NOT_QUEUED: u32 = 1 << 30;
/// Internal: runs the commands MULTI queued (EXEC), so it is admitted under
/// maxmemory as they would be.
pub const RUNS_QUEUED: u32 = 1 << 29;
/// Internal: drops the connection's WATCHes (EXEC, DISCARD, UNWATCH, RESET), so it
/// locks the watched keys' shards and waits for a script that holds them.
pub const UNWATCHES: u32 = 1 << 28;
/// Internal: runs a script, which registers as running only if no other client's
/// script holds its shards, and otherwise waits or answers BUSY itself (EVAL and
/// its kin): outside MULTI, and off slots being moved, it skips the script gate.
pub const RUNS_SCRIPT: u32 = 1 << 26;

const FLAG_NAMES: &[(u32, &str)] = &[
    (WRITE, "write"),
    (READONLY, "readonly"),
    (DENYOOM, "denyoom"),
    (ADMIN, "admin"),
    (PUBSUB, "pubsub"),
    (NOSCRIPT, "noscript"),
    (LOADING, "loading"),
    (STALE, "stale"),
    (FAST, "fast"),
    (NO_AUTH, "no_auth"),
    (NO_MULTI, "no_multi"),
    (ALLOW_BUSY, "allow_busy"),
    (SKIP_MONITOR, "skip_monitor"),
    (SKIP_SLOWLOG, "skip_slowlog"),
    (MOVABLE_KEYS, "movablekeys"),
    (BLOCKING, "blocking"),
    (NO_MANDATORY_KEYS, "no_mandatory_keys"),
    (ASKING, "asking"),
];

/// Where a command's keys are among its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// No keys (PING, INFO …).
    None,
    /// Keys at `first`, `first + step`, … up to `last` (negative: from the end, -1 is
    /// the last argument), as COMMAND INFO's first/last/step.
    Range { first: i32, last: i32, step: i32 },
    /// `args[at]` is a count of keys that follow it (SINTERCARD numkeys key …).
    Counted { at: usize },
    /// The whole keyspace (KEYS, SCAN, FLUSHALL, DBSIZE, RANDOMKEY).
    All,
    /// MIGRATE's: the key at 3, or, when it is empty and a `KEYS` option comes
    /// after the fixed arguments, every argument after `KEYS` (Redis's
    /// `migrateGetKeys`, which skips AUTH's and AUTH2's values on the way).
    Migrate,
}

impl Keys {
    pub const ONE: Keys = Keys::Range {
        first: 1,
        last: 1,
        step: 1,
    };
    pub const ALL_ARGS: Keys = Keys::Range {
        first: 1,
        last: -1,
        step: 1,
    };
    /// `key value key value …` (MSET).
    pub const PAIRS: Keys = Keys::Range {
        first: 1,
        last: -1,
        step: 2,
    };
    /// Two keys at 1 and 2 (RENAME).
    pub const TWO: Keys = Keys::Range {
        first: 1,
        last: 2,
        step: 1,
    };
}

/// The group COMMAND DOCS reports, which also gives the ACL category.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    Generic,
    String,
    Set,
    Connection,
    Server,
    Transactions,
    Scripting,
    Pubsub,
    /// relcache's own IDSET.* family.
    Idset,
    Cluster,
}

impl Group {
    pub fn name(self) -> &'static str {
        match self {
            Group::Generic => "generic",
            Group::String => "string",
            Group::Set => "set",
            Group::Connection => "connection",
            Group::Server => "server",
            Group::Transactions => "transactions",
            Group::Scripting => "scripting",
            Group::Pubsub => "pubsub",
            Group::Idset => "module",
            Group::Cluster => "cluster",
        }
    }

    fn acl(self) -> &'static str {
        match self {
            Group::Generic => "@keyspace",
            Group::String => "@string",
            Group::Set | Group::Idset => "@set",
            Group::Connection => "@connection",
            Group::Server => "@admin",
            Group::Transactions => "@transaction",
            Group::Scripting => "@scripting",
            Group::Pubsub => "@pubsub",
            // Redis gives cluster commands no category of their own.
            Group::Cluster => "",
        }
    }
}

/// One command (or subcommand, whose name is `container|sub`).
pub struct CommandSpec {
    /// Lower-case name; `client|setname` for subcommands.
    pub name: &'static str,
    /// Redis arity: exact argument count including the name when positive, minimum
    /// when negative.
    pub arity: i32,
    pub flags: u32,
    pub keys: Keys,
    pub group: Group,
    pub since: &'static str,
    pub summary: &'static str,
    pub complexity: &'static str,
    pub handler: Handler,
    /// For container commands (CLIENT, CONFIG …); dispatch picks one by `args[1]`.
    pub subcommands: &'static [CommandSpec],
}

fn container(_: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    unreachable!("container commands dispatch to their subcommands")
}

impl CommandSpec {
    /// Defaults for struct-update syntax in the family tables.
    pub const DEFAULT: CommandSpec = CommandSpec {
        name: "",
        arity: 1,
        flags: 0,
        keys: Keys::None,
        group: Group::Generic,
        since: "1.0.0",
        summary: "",
        complexity: "O(1)",
        handler: container,
        subcommands: &[],
    };

    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// Whether `argc` arguments (name included) satisfy the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i64;
        let a = self.arity as i64;
        if a >= 0 {
            argc == a
        } else {
            argc >= -a
        }
    }

    /// The flag names COMMAND INFO reports.
    pub fn flag_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        FLAG_NAMES
            .iter()
            .filter(|(f, _)| self.has(*f))
            .map(|(_, n)| *n)
    }

    /// ACL categories, derived from flags and group.
    pub fn acl_categories(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.has(WRITE) {
            v.push("@write");
        }
        if self.has(READONLY) {
            v.push("@read");
        }
        if self.has(ADMIN) {
            v.extend(["@admin", "@dangerous"]);
        }
        let dangerous = self.has(DANGEROUS) && !self.has(ADMIN);
        // Redis puts PUBSUB HELP (and the bare container) in @slow alone.
        if dangerous {
            v.push(Group::Generic.acl());
        } else if (self.group != Group::Pubsub || self.has(PUBSUB)) && self.group != Group::Cluster
        {
            v.push(self.group.acl());
        }
        v.push(if self.has(FAST) { "@fast" } else { "@slow" });
        if dangerous {
            v.push("@dangerous");
        }
        v.dedup();
        v
    }

    /// COMMAND INFO's (first, last, step).
    pub fn key_range(&self) -> (i64, i64, i64) {
        match self.keys {
            Keys::Range { first, last, step } => (first as i64, last as i64, step as i64),
            Keys::Migrate => (3, 3, 1),
            Keys::Counted { .. } | Keys::None | Keys::All => (0, 0, 0),
        }
    }

    /// Indices of the key arguments in `args` (COMMAND GETKEYS and shard locking).
    /// `None` for keyspace-wide commands.
    pub fn key_indices(&self, args: &[impl AsRef<[u8]>]) -> Option<Vec<usize>> {
        let n = args.len() as i64;
        match self.keys {
            Keys::None => Some(Vec::new()),
            Keys::All => None,
            Keys::Range { first, last, step } => {
                let first = first as i64;
                let last = if last < 0 {
                    n + last as i64
                } else {
                    (last as i64).min(n - 1)
                };
                if first >= n || last < first {
                    return Some(Vec::new());
                }
                Some(
                    (first..=last)
                        .step_by(step as usize)
                        .map(|i| i as usize)
                        .collect(),
                )
            }
            Keys::Counted { at } => {
                let count = args
                    .get(at)
                    .and_then(|a| std::str::from_utf8(a.as_ref()).ok())
                    .and_then(|s| s.parse::<usize>().ok())
                    .unwrap_or(0);
                let end = (at + 1 + count).min(args.len());
                Some((at + 1..end).collect())
            }
            Keys::Migrate => Some(migrate_keys(args)),
        }
    }
}

/// MIGRATE's key positions, found as Redis's `migrateGetKeys` finds them: none
/// when `KEYS` follows a non-empty key (a syntax error MIGRATE reports itself).
fn migrate_keys(args: &[impl AsRef<[u8]>]) -> Vec<usize> {
    let mut i = 6;
    while i < args.len() {
        let a = args[i].as_ref();
        if a.eq_ignore_ascii_case(b"keys") {
            return match args[3].as_ref().is_empty() {
                true => (i + 1..args.len()).collect(),
                false => Vec::new(),
            };
        }
        if a.eq_ignore_ascii_case(b"auth") {
            i += 1;
        } else if a.eq_ignore_ascii_case(b"auth2") {
            i += 2;
        }
        i += 1;
    }
    if args.len() > 3 {
        vec![3]
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cmd::test_args as args;

    #[test]
    fn key_positions() {
        let mset = CommandSpec {
            keys: Keys::PAIRS,
            ..CommandSpec::DEFAULT
        };
        assert_eq!(
            mset.key_indices(&args(&["mset", "a", "1", "b", "2"])),
            Some(vec![1, 3])
        );
        let del = CommandSpec {
            keys: Keys::ALL_ARGS,
            ..CommandSpec::DEFAULT
        };
        assert_eq!(del.key_indices(&args(&["del", "a", "b"])), Some(vec![1, 2]));
        let inter = CommandSpec {
            keys: Keys::Counted { at: 1 },
            ..CommandSpec::DEFAULT
        };
        assert_eq!(
            inter.key_indices(&args(&["sintercard", "2", "a", "b", "LIMIT", "1"])),
            Some(vec![2, 3])
        );
        assert_eq!(
            inter.key_indices(&args(&["sintercard", "9", "a"])),
            Some(vec![2])
        );
        let get = CommandSpec {
            keys: Keys::ONE,
            arity: 2,
            ..CommandSpec::DEFAULT
        };
        assert!(get.arity_ok(2) && !get.arity_ok(3));
        let migrate = CommandSpec {
            keys: Keys::Migrate,
            ..CommandSpec::DEFAULT
        };
        let m = |a: &[&str]| migrate.key_indices(&args(a));
        assert_eq!(m(&["migrate", "h", "1", "k", "0", "5"]), Some(vec![3]));
        assert_eq!(
            m(&["migrate", "h", "1", "", "0", "5", "COPY", "KEYS", "a", "b"]),
            Some(vec![8, 9])
        );
        assert_eq!(
            m(&["migrate", "h", "1", "", "0", "5", "AUTH", "keys", "KEYS", "a"]),
            Some(vec![9]),
            "a password spelled KEYS is skipped"
        );
        assert_eq!(
            m(&["migrate", "h", "1", "k", "0", "5", "KEYS", "a"]),
            Some(vec![])
        );
        let neg = CommandSpec {
            arity: -2,
            ..CommandSpec::DEFAULT
        };
        assert!(neg.arity_ok(5) && !neg.arity_ok(1));
    }
}
