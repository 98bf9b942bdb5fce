//! Hostile tables through SET and IDSET.LOAD, mixed with set writes and reads,
//! inside and outside MULTI/EXEC, with WATCH.
//!
//! Invariant: every reply agrees with a model of the keyspace, in which a table
//! the validator accepts holds exactly the ids in its slots and flags, a refused
//! table leaves the key as it was, and a watched key written by another client
//! makes EXEC run nothing. An honest second client's keys, set up first, are
//! checked at the end: a hostile table can never cause a wrong answer anywhere.
#![no_main]

use std::collections::BTreeSet;

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use relcache_protocol::idset::{looks_like_table, validate, Builder};
use relcache_protocol::resp::Frame;
use relcache_server_fuzz::{
    arg, bulk, call, check_key, harness, hostile_table, id, ids, int, is_error, show, Client,
    Model, Value,
};

const KEYS: [&[u8]; 3] = [b"k0", b"k1", b"k2"];

/// One command on the keyspace.
#[derive(Debug)]
enum Cmd {
    SetTable(usize, Vec<u8>),
    LoadTable(usize, Vec<u8>),
    LoadIds(usize, Vec<u64>),
    Sadd(usize, Vec<u64>),
    Srem(usize, Vec<u64>),
    IdsetAdd(usize, bool, Vec<u64>),
    IdsetRem(usize, Vec<u64>),
    Mexists(usize, Vec<u64>),
    Smismember(usize, Vec<u64>),
    Which(u64),
    Scard(usize),
    Get(usize),
    Del(usize),
}

/// What the reply must be.
#[derive(Debug)]
enum Expect {
    Reply(Frame),
    Error(&'static str),
}

impl Cmd {
    fn args(&self) -> Vec<Vec<u8>> {
        let with_ids = |name: &str, k: usize, ids: &[u64]| {
            let mut a = vec![name.as_bytes().to_vec(), KEYS[k].to_vec()];
            a.extend(ids.iter().map(|&i| arg(i)));
            a
        };
        match self {
            Cmd::SetTable(k, t) => vec![b"SET".to_vec(), KEYS[*k].to_vec(), t.clone()],
            Cmd::LoadTable(k, t) => vec![
                b"IDSET.LOAD".to_vec(),
                KEYS[*k].to_vec(),
                b"TABLE".to_vec(),
                t.clone(),
            ],
            Cmd::LoadIds(k, ids) => {
                let mut a = with_ids("IDSET.LOAD", *k, ids);
                a.insert(2, b"IDS".to_vec());
                a
            }
            Cmd::Sadd(k, ids) => with_ids("SADD", *k, ids),
            Cmd::Srem(k, ids) => with_ids("SREM", *k, ids),
            Cmd::IdsetAdd(k, xx, ids) => {
                let mut a = with_ids("IDSET.ADD", *k, ids);
                if *xx {
                    a.insert(2, b"XX".to_vec());
                }
                a
            }
            Cmd::IdsetRem(k, ids) => with_ids("IDSET.REM", *k, ids),
            Cmd::Mexists(k, ids) => with_ids("IDSET.MEXISTS", *k, ids),
            Cmd::Smismember(k, ids) => with_ids("SMISMEMBER", *k, ids),
            Cmd::Which(id) => {
                let mut a = vec![b"IDSET.WHICH".to_vec(), arg(*id)];
                a.extend(KEYS.iter().map(|k| k.to_vec()));
                a
            }
            Cmd::Scard(k) => vec![b"SCARD".to_vec(), KEYS[*k].to_vec()],
            Cmd::Get(k) => vec![b"GET".to_vec(), KEYS[*k].to_vec()],
            Cmd::Del(k) => vec![b"DEL".to_vec(), KEYS[*k].to_vec()],
        }
    }

    /// The key it may write, if any.
    fn writes(&self) -> Option<usize> {
        match self {
            Cmd::SetTable(k, _)
            | Cmd::LoadTable(k, _)
            | Cmd::LoadIds(k, _)
            | Cmd::Sadd(k, _)
            | Cmd::Srem(k, _)
            | Cmd::IdsetAdd(k, _, _)
            | Cmd::IdsetRem(k, _)
            | Cmd::Del(k) => Some(*k),
            _ => None,
        }
    }

    /// Applies the command to the model and says what it must answer.
    fn apply(&self, model: &mut Model) -> Expect {
        use Expect::{Error, Reply};
        const WRONGTYPE: Expect = Error("WRONGTYPE");
        let key = |k: &usize| KEYS[*k].to_vec();
        let bits = |set: &BTreeSet<u64>, ids: &[u64]| {
            Frame::Array(ids.iter().map(|i| int(set.contains(i).into())).collect())
        };
        match self {
            Cmd::SetTable(k, t) => {
                if !looks_like_table(t) {
                    model.insert(key(k), Value::Str(t.clone()));
                } else if validate(t).is_ok() {
                    model.insert(key(k), Value::Set(relcache_server_fuzz::raw_members(t)));
                } else {
                    return Error("ERR");
                }
                Reply(Frame::ok())
            }
            Cmd::LoadTable(k, t) => {
                if validate(t).is_err() {
                    return Error("ERR");
                }
                let members = relcache_server_fuzz::raw_members(t);
                let n = members.len() as u64;
                model.insert(key(k), Value::Set(members));
                Reply(int(n))
            }
            Cmd::LoadIds(k, ids) => {
                let members: BTreeSet<u64> = ids.iter().copied().collect();
                let n = members.len() as u64;
                model.insert(key(k), Value::Set(members));
                Reply(int(n))
            }
            Cmd::Sadd(k, ids) | Cmd::IdsetAdd(k, false, ids) => match model.get_mut(&key(k)) {
                Some(Value::Str(_)) => WRONGTYPE,
                Some(Value::Set(set)) => {
                    Reply(int(ids.iter().filter(|&&i| set.insert(i)).count() as u64))
                }
                None => {
                    let set: BTreeSet<u64> = ids.iter().copied().collect();
                    let n = set.len() as u64;
                    model.insert(key(k), Value::Set(set));
                    Reply(int(n))
                }
            },
            Cmd::IdsetAdd(k, true, ids) => match model.get_mut(&key(k)) {
                Some(Value::Str(_)) => WRONGTYPE,
                Some(Value::Set(set)) => {
                    Reply(int(ids.iter().filter(|&&i| set.insert(i)).count() as u64))
                }
                None => Reply(Frame::Null),
            },
            Cmd::Srem(k, ids) => match model.get_mut(&key(k)) {
                Some(Value::Str(_)) => WRONGTYPE,
                Some(Value::Set(set)) => {
                    let n = ids.iter().filter(|&i| set.remove(i)).count() as u64;
                    // SREM deletes a set it empties, as Redis does.
                    if set.is_empty() && n > 0 {
                        model.remove(&key(k));
                    }
                    Reply(int(n))
                }
                None => Reply(int(0)),
            },
            Cmd::IdsetRem(k, ids) => match model.get_mut(&key(k)) {
                Some(Value::Str(_)) => WRONGTYPE,
                // An emptied set stays: it is a cached answer.
                Some(Value::Set(set)) => {
                    Reply(int(ids.iter().filter(|&i| set.remove(i)).count() as u64))
                }
                None => Reply(Frame::Null),
            },
            Cmd::Mexists(k, ids) => match model.get(&key(k)) {
                Some(Value::Str(_)) => WRONGTYPE,
                Some(Value::Set(set)) => Reply(bits(set, ids)),
                None => Reply(Frame::Null),
            },
            Cmd::Smismember(k, ids) => match model.get(&key(k)) {
                Some(Value::Str(_)) => WRONGTYPE,
                Some(Value::Set(set)) => Reply(bits(set, ids)),
                None => Reply(bits(&BTreeSet::new(), ids)),
            },
            Cmd::Which(id) => {
                let mut out = Vec::new();
                for k in KEYS {
                    out.push(match model.get(k) {
                        Some(Value::Str(_)) => return WRONGTYPE,
                        Some(Value::Set(set)) => int(set.contains(id).into()),
                        None => Frame::Null,
                    });
                }
                Reply(Frame::Array(out))
            }
            Cmd::Scard(k) => match model.get(&key(k)) {
                Some(Value::Str(_)) => WRONGTYPE,
                Some(Value::Set(set)) => Reply(int(set.len() as u64)),
                None => Reply(int(0)),
            },
            Cmd::Get(k) => match model.get(&key(k)) {
                Some(Value::Str(s)) => Reply(bulk(s)),
                Some(Value::Set(_)) => WRONGTYPE,
                None => Reply(Frame::Null),
            },
            Cmd::Del(k) => Reply(int(model.remove(&key(k)).is_some().into())),
        }
    }
}

fn check(cmd: &Cmd, got: &Frame, want: &Expect) {
    let ok = match want {
        Expect::Reply(f) => got == f,
        Expect::Error(prefix) => is_error(got, prefix),
    };
    assert!(
        ok,
        "{}: got {got:?}, want {want:?}",
        show(&cmd.args().iter().map(Vec::as_slice).collect::<Vec<_>>())
    );
}

fn send(c: &mut Client, cmd: &Cmd) -> Frame {
    let args = cmd.args();
    call(c, &args.iter().map(Vec::as_slice).collect::<Vec<_>>())
}

fn gen_cmd(u: &mut Unstructured<'_>) -> Result<Cmd> {
    let k = u.choose_index(KEYS.len())?;
    Ok(match u.int_in_range(0u8..=12)? {
        0 | 1 => Cmd::SetTable(k, hostile_table(u)?),
        2 | 3 => Cmd::LoadTable(k, hostile_table(u)?),
        4 => Cmd::LoadIds(k, ids(u, 8)?),
        5 => Cmd::Sadd(k, ids(u, 6)?),
        6 => Cmd::Srem(k, ids(u, 6)?),
        7 => Cmd::IdsetAdd(k, u.arbitrary()?, ids(u, 6)?),
        8 => Cmd::IdsetRem(k, ids(u, 6)?),
        9 => Cmd::Mexists(k, ids(u, 6)?),
        10 => Cmd::Smismember(k, ids(u, 6)?),
        11 => Cmd::Which(id(u)?),
        _ => match u.int_in_range(0u8..=2)? {
            0 => Cmd::Scard(k),
            1 => Cmd::Get(k),
            _ => Cmd::Del(k),
        },
    })
}

/// Whether EXEC must abort because a watched key was written: surely (another
/// client changed it), maybe (this client wrote it, which in Redis counts only
/// when the value changed), or not at all.
#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Dirty {
    No,
    Maybe,
    Yes,
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let harness = harness(false);
    let mut a = harness.connect();
    let mut b = harness.connect();
    if u.arbitrary()? {
        assert!(matches!(call(&mut a, &[b"HELLO", b"3"]), Frame::Array(_)));
    }

    // The honest client's keys, which nothing below may change.
    let honest_table = Builder::new().build(&[1, 2, 3, 0, u64::MAX]);
    assert_eq!(
        call(&mut b, &[b"SET", b"honest:table", &honest_table]),
        Frame::ok()
    );
    assert_eq!(call(&mut b, &[b"SADD", b"honest:set", b"7", b"8"]), int(2));

    let mut model = Model::new();
    let mut queued: Option<Vec<Cmd>> = None;
    let mut watched: BTreeSet<usize> = BTreeSet::new();
    let mut dirty = Dirty::No;
    let mut others = 0u32;
    // Running out of input ends the steps, never the final checks.
    let mut steps = || -> Result<()> {
        for _ in 0..u.int_in_range(1..=40)? {
            match u.int_in_range(0u8..=19)? {
                0 => {
                    let reply = call(&mut a, &[b"MULTI"]);
                    if queued.is_some() {
                        assert!(is_error(&reply, "ERR MULTI calls can not be nested"));
                    } else {
                        assert_eq!(reply, Frame::ok());
                        queued = Some(Vec::new());
                    }
                }
                1 | 2 => {
                    let reply = call(&mut a, &[b"EXEC"]);
                    let Some(cmds) = queued.take() else {
                        assert!(is_error(&reply, "ERR EXEC without MULTI"));
                        continue;
                    };
                    match reply {
                        Frame::Null => assert!(dirty >= Dirty::Maybe, "EXEC aborted for nothing"),
                        Frame::Array(replies) => {
                            assert!(dirty < Dirty::Yes, "EXEC ran though a watched key changed");
                            assert_eq!(replies.len(), cmds.len());
                            for (cmd, got) in cmds.iter().zip(&replies) {
                                let want = cmd.apply(&mut model);
                                check(cmd, got, &want);
                            }
                        }
                        other => panic!("EXEC answered {other:?}"),
                    }
                    watched.clear();
                    dirty = Dirty::No;
                }
                3 => {
                    let reply = call(&mut a, &[b"DISCARD"]);
                    if queued.take().is_some() {
                        assert_eq!(reply, Frame::ok());
                        watched.clear();
                        dirty = Dirty::No;
                    } else {
                        assert!(is_error(&reply, "ERR DISCARD without MULTI"));
                    }
                }
                4 if queued.is_none() => {
                    let k = u.choose_index(KEYS.len())?;
                    assert_eq!(call(&mut a, &[b"WATCH", KEYS[k]]), Frame::ok());
                    watched.insert(k);
                }
                5 => {
                    // Another client writes a key for sure.
                    let k = u.choose_index(KEYS.len())?;
                    others += 1;
                    let value = format!("other-{others}").into_bytes();
                    assert_eq!(call(&mut b, &[b"SET", KEYS[k], &value]), Frame::ok());
                    model.insert(KEYS[k].to_vec(), Value::Str(value));
                    if watched.contains(&k) {
                        dirty = Dirty::Yes;
                    }
                }
                _ => {
                    let cmd = gen_cmd(u)?;
                    let reply = send(&mut a, &cmd);
                    match &mut queued {
                        Some(cmds) => {
                            assert_eq!(reply, Frame::Simple("QUEUED".into()), "{cmd:?}");
                            cmds.push(cmd);
                        }
                        None => {
                            let before = cmd.writes().map(|k| model.get(KEYS[k]).cloned());
                            let want = cmd.apply(&mut model);
                            check(&cmd, &reply, &want);
                            if let Some(k) = cmd.writes().filter(|k| watched.contains(k)) {
                                let changed = before != Some(model.get(KEYS[k]).cloned());
                                let level = if changed { Dirty::Yes } else { Dirty::Maybe };
                                if level > dirty {
                                    dirty = level;
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    };
    let _ = steps();
    if queued.is_some() {
        assert_eq!(call(&mut a, &[b"DISCARD"]), Frame::ok());
    }
    for k in KEYS {
        check_key(&mut b, k, model.get(k));
    }
    check_key(
        &mut b,
        b"honest:table",
        Some(&Value::Set([0, 1, 2, 3, u64::MAX].into())),
    );
    check_key(&mut b, b"honest:set", Some(&Value::Set([7, 8].into())));
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
