//! Which node serves a command: this one, or a redirect, decided before the
//! command runs (Redis's `getNodeByQuery`, rule for rule).
//!
//! A command's keys (from its key specs; for EXEC, every queued command's) must
//! all hash to one slot, else `-CROSSSLOT`. A slot nobody owns is
//! `-CLUSTERDOWN Hash slot not served`; one another node owns is `-MOVED`. While
//! this node migrates the slot, a command whose keys are all gone from here is
//! sent on with `-ASK` (some gone and some here: `-TRYAGAIN`); while it imports
//! the slot, a client that sent ASKING (or RESTORE-ASKING) is served here. A
//! command without keys always runs here.

use std::sync::atomic::Ordering::Relaxed;

use relcache_protocol::slot::key_slot;

use crate::cmd::{spec, CommandSpec};
use crate::error::CmdError;
use crate::server::Server;

/// Why a command does not run on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {
    Moved { slot: u16, addr: String },
    Ask { slot: u16, addr: String },
    CrossSlot,
    TryAgain,
    Unbound,
    Down,
    DownReadOnly,
}

impl Redirect {
    /// The error reply, as Redis words it.
    pub fn to_error(&self) -> CmdError {
        CmdError::Coded(match self {
            Redirect::Moved { slot, addr } => format!("MOVED {slot} {addr}"),
            Redirect::Ask { slot, addr } => format!("ASK {slot} {addr}"),
            Redirect::CrossSlot => "CROSSSLOT Keys in request don't hash to the same slot".into(),
            Redirect::TryAgain => "TRYAGAIN Multiple keys request during rehashing of slot".into(),
            Redirect::Unbound => "CLUSTERDOWN Hash slot not served".into(),
            Redirect::Down => "CLUSTERDOWN The cluster is down".into(),
            Redirect::DownReadOnly => {
                "CLUSTERDOWN The cluster is down and only accepts read commands".into()
            }
        })
    }
}

/// One command to place: its spec and arguments (slices, or a queued command's
/// owned arguments).
pub type Request<'r, A> = (&'static CommandSpec, &'r [A]);

/// Where `requests` (one command, or a transaction's queue) run: here, a
/// redirect, or — in a slot being moved — a verdict that depends on which of
/// the keys are here ([`Moving::decide`]), which the caller must learn under
/// the keys' own locks (else a key migrated between the look and the command
/// would be written back here, behind MIGRATE). `asking`: the client sent ASKING
/// for this command.
pub fn route<'r, A: AsRef<[u8]> + 'r>(
    server: &Server,
    requests: impl Iterator<Item = Request<'r, A>>,
    asking: bool,
) -> Result<Placed, Redirect> {
    let cluster = &server.cluster;
    let requests: smallvec::SmallVec<[Request<'r, A>; 1]> = requests.collect();
    // The common case without a lock: every key in one slot this node serves.
    let mut one_slot = None;
    let mut fast = true;
    'keys: for (spec, args) in &requests {
        if let Some(keys) = crate::cmd::command_keys(spec, args) {
            for key in keys {
                let this = key_slot(key);
                if *one_slot.get_or_insert(this) != this {
                    fast = false;
                    break 'keys;
                }
            }
        }
    }
    match one_slot {
        None => return Ok(Placed::Here),
        Some(slot) if fast && cluster.serves(slot) && cluster.ok(server) => {
            return Ok(Placed::Here)
        }
        _ => {}
    }
    let mut slot = None;
    let mut first_key: Option<&[u8]> = None;
    let mut multiple_keys = false;
    let mut pubsub_shard = false;
    let mut writes = false;
    let mut migrate = false;
    let mut asking = asking;
    for (spec, args) in &requests {
        let Some(keys) = crate::cmd::command_keys(spec, args) else {
            continue;
        };
        pubsub_shard |= matches!(spec.name, "ssubscribe" | "sunsubscribe" | "spublish");
        writes |= spec.has(spec::WRITE) || spec.name == "eval" || spec.name == "evalsha";
        migrate |= spec.name == "migrate";
        asking |= spec.has(spec::ASKING);
        for key in keys {
            let this = key_slot(key);
            match slot {
                None => {
                    slot = Some(this);
                    first_key = Some(key);
                }
                Some(s) if s != this => {
                    // Redis finds an unowned first slot before a second slot.
                    if cluster.read().owner[s as usize].is_none() {
                        return Err(Redirect::Unbound);
                    }
                    return Err(Redirect::CrossSlot);
                }
                Some(_) => multiple_keys |= first_key != Some(key),
            }
        }
    }
    let Some(slot) = slot else {
        return Ok(Placed::Here);
    };
    // What the decision needs, copied out: the cluster lock is never held while
    // waiting for anything else.
    let (owner, ask_to, importing) = {
        let state = cluster.read();
        let owner = match state.owner[slot as usize] {
            None => return Err(Redirect::Unbound),
            Some(id) if id == state.myself => Ok(()),
            Some(id) => Err(Redirect::Moved {
                slot,
                addr: state.node(&id).map(|n| n.addr()).unwrap_or_default(),
            }),
        };
        let ask_to = state
            .migrating
            .get(&slot)
            .filter(|_| owner.is_ok())
            .map(|to| state.node(to).map(|n| n.addr()).unwrap_or_default());
        let importing = ask_to.is_none() && state.importing.contains_key(&slot);
        (owner, ask_to, importing)
    };
    if !cluster.ok(server) {
        let reads_allowed = server.config.cluster_allow_reads_when_down.load(Relaxed);
        if !reads_allowed {
            return Err(Redirect::Down);
        }
        if writes {
            return Err(Redirect::DownReadOnly);
        }
    }
    if ask_to.is_none() && !importing {
        return owner.map(|()| Placed::Here);
    }
    let moving = Moving {
        slot,
        ask_to,
        importing,
        asking,
        multiple_keys,
        owner,
    };
    if migrate || pubsub_shard {
        // MIGRATE runs where its keys are; shard channels are not keys that exist.
        return moving.decide(0, 0).map(|()| Placed::Here);
    }
    Ok(Placed::Moving(moving))
}

/// Where a command runs, when it is not redirected.
#[derive(Debug)]
pub enum Placed {
    Here,
    /// Its slot is being moved: [`Moving::decide`] once the keys are looked at.
    Moving(Moving),
}

/// A command in a slot this node migrates or imports, placed by which of its
/// keys are here.
#[derive(Debug)]
pub struct Moving {
    slot: u16,
    /// Migrating: the address keys that are gone went to.
    ask_to: Option<String>,
    importing: bool,
    asking: bool,
    multiple_keys: bool,
    /// The verdict by owner alone.
    owner: Result<(), Redirect>,
}

impl Moving {
    /// Redis's rules: while migrating, a command whose keys are all gone is
    /// asked for at the target, a mix is TRYAGAIN; while importing, ASKING
    /// serves it here unless it is a multi-key command with keys missing.
    pub fn decide(&self, missing: usize, existing: usize) -> Result<(), Redirect> {
        if let Some(addr) = &self.ask_to {
            if missing > 0 {
                if existing > 0 {
                    return Err(Redirect::TryAgain);
                }
                return Err(Redirect::Ask {
                    slot: self.slot,
                    addr: addr.clone(),
                });
            }
        }
        if self.importing && self.asking {
            if self.multiple_keys && missing > 0 {
                return Err(Redirect::TryAgain);
            }
            return Ok(());
        }
        self.owner.clone()
    }

    /// [`decide`](Self::decide) by looking the keys up without their locks: for
    /// a command that is only queued (MULTI), or for EXEC, which looks again
    /// under its own locks only as far as its commands do.
    pub fn decide_unlocked<'k>(
        &self,
        server: &Server,
        keys: impl Iterator<Item = &'k [u8]>,
    ) -> Result<(), Redirect> {
        let (mut missing, mut existing) = (0, 0);
        for k in keys {
            if server.db.exists(k) {
                existing += 1;
            } else {
                missing += 1;
            }
        }
        self.decide(missing, existing)
    }
}
