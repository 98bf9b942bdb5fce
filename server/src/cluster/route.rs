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

use bytes::Bytes;
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

/// One command to place: its spec and arguments.
pub type Request<'r> = (&'static CommandSpec, &'r [Bytes]);

/// Where `requests` (one command, or a transaction's queue) run. `asking`: the
/// client sent ASKING for this command.
pub fn route<'r>(
    server: &Server,
    requests: impl Iterator<Item = Request<'r>>,
    asking: bool,
) -> Result<(), Redirect> {
    let cluster = &server.cluster;
    let state = cluster.read();
    let mut slot = None;
    let mut first_key: Option<&[u8]> = None;
    let mut multiple_keys = false;
    let mut moving = Moving::No;
    let (mut missing, mut existing) = (0usize, 0usize);
    let mut pubsub_shard = false;
    let mut writes = false;
    let mut migrate = false;
    let mut asking = asking;
    for (spec, args) in requests {
        let Some(keys) = crate::cmd::command_keys(spec, args) else {
            continue;
        };
        pubsub_shard |= matches!(spec.name, "ssubscribe" | "sunsubscribe" | "spublish");
        writes |= spec.has(spec::WRITE);
        migrate |= spec.name == "migrate";
        asking |= spec.has(spec::ASKING);
        for key in keys {
            let this = key_slot(key);
            match slot {
                None => {
                    slot = Some(this);
                    first_key = Some(key);
                    let owner = state.owner[this as usize];
                    if owner.is_none() {
                        return Err(Redirect::Unbound);
                    }
                    if owner == Some(state.myself) && state.migrating.contains_key(&this) {
                        moving = Moving::Out;
                    } else if state.importing.contains_key(&this) {
                        moving = Moving::In;
                    }
                }
                Some(s) if s != this => return Err(Redirect::CrossSlot),
                Some(_) => {
                    if moving == Moving::In && first_key != Some(key) {
                        multiple_keys = true;
                    }
                }
            }
            if moving != Moving::No && !pubsub_shard {
                if server.db.exists(key) {
                    existing += 1;
                } else {
                    missing += 1;
                }
            }
        }
    }
    let Some(slot) = slot else {
        return Ok(());
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
    if moving != Moving::No && migrate {
        return Ok(());
    }
    if moving == Moving::Out && missing > 0 {
        if existing > 0 {
            return Err(Redirect::TryAgain);
        }
        let to = state.migrating[&slot];
        let addr = state.node(&to).map(|n| n.addr()).unwrap_or_default();
        return Err(Redirect::Ask { slot, addr });
    }
    if moving == Moving::In && asking {
        if multiple_keys && missing > 0 {
            return Err(Redirect::TryAgain);
        }
        return Ok(());
    }
    match state.owner[slot as usize] {
        Some(owner) if owner == state.myself => Ok(()),
        Some(owner) => Err(Redirect::Moved {
            slot,
            addr: state.node(&owner).map(|n| n.addr()).unwrap_or_default(),
        }),
        None => Err(Redirect::Unbound),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Moving {
    No,
    Out,
    In,
}
