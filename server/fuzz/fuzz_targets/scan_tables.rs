//! Degenerate tables (a few ids in a huge capacity, every slot full, mostly
//! tombstones, ids that all probe from one slot), sometimes damaged, loaded and then
//! read every way there is: IDSET.SCAN and SSCAN cursor walks with random COUNT and
//! MATCH, SMEMBERS, SINTER, IDSET.WHICH, IDSET.MEXISTS, with adds and removes in
//! between.
//!
//! Invariants: the server accepts a table exactly when the validator does; a full
//! cursor walk returns every member at least once and nothing else, in pages of at
//! most COUNT members (the flag ids aside) and in as many calls as the slots allow;
//! every other read agrees with the model (the ids in the table's slots and flags);
//! each call stays within a generous time bound.
#![no_main]

use std::collections::BTreeSet;

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use relcache_protocol::idset::{validate, Header};
use relcache_protocol::resp::Frame;
use relcache_server_fuzz::{
    arg, call, degenerate_table, glob, harness, id, ids, ids_of, int, mutate, raw_members, Client,
    Shape,
};

const KEY: &[u8] = b"t";
const OTHER: &[u8] = b"o";
const MISSING: &[u8] = b"missing";

/// The cursor and page of a scan reply (`[cursor, [ids…]]`), or `None` for nil.
fn page(reply: &Frame) -> Option<(u64, Vec<u64>)> {
    match reply {
        Frame::Null => None,
        Frame::Array(v) if v.len() == 2 => {
            let cursor = ids_of(&Frame::Array(vec![v[0].clone()]))[0];
            Some((cursor, ids_of(&v[1])))
        }
        other => panic!("not a scan reply: {other:?}"),
    }
}

/// Walks a cursor to its end; checks the page sizes and the number of calls.
fn walk(
    c: &mut Client,
    max_calls: u64,
    page_max: usize,
    mut next: impl FnMut(&mut Client, u64) -> Frame,
) -> Option<BTreeSet<u64>> {
    let mut seen = BTreeSet::new();
    let mut cursor = 0;
    for _ in 0..max_calls {
        let (to, ids) = page(&next(c, cursor))?;
        assert!(
            ids.len() <= page_max + 2,
            "a page of {} ids for COUNT {page_max}",
            ids.len()
        );
        seen.extend(ids);
        if to == 0 {
            return Some(seen);
        }
        cursor = to;
    }
    panic!("a cursor walk took more than {max_calls} calls");
}

/// The stored table's capacity (adds and removes may rebuild it).
fn capacity(c: &mut Client) -> u64 {
    match call(c, &[b"IDSET.TABLE", KEY]) {
        Frame::Bulk(t) => u64::from(Header::parse(&t).expect("a stored table").capacity),
        _ => 2,
    }
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let harness = harness(false);
    let mut c = harness.connect();
    if u.arbitrary()? {
        assert!(matches!(call(&mut c, &[b"HELLO", b"3"]), Frame::Array(_)));
    }
    let shape = *u.choose(&[
        Shape::Sparse,
        Shape::Dense,
        Shape::Tombstones,
        Shape::Colliding,
    ])?;
    let mut bytes = degenerate_table(u, shape)?;
    if u.ratio(1, 4)? {
        mutate(u, &mut bytes)?;
    }
    let accepted = validate(&bytes).is_ok();
    let reply = call(&mut c, &[b"IDSET.LOAD", KEY, b"TABLE", &bytes]);
    // Sets the validator refuses are absent: every read must then say so.
    let mut members = if accepted {
        let members = raw_members(&bytes);
        assert_eq!(reply, int(members.len() as u64), "{shape:?}");
        Some(members)
    } else {
        assert!(matches!(reply, Frame::Error(_)), "{reply:?}");
        None
    };

    let other: BTreeSet<u64> = match &members {
        Some(m) if !m.is_empty() && u.arbitrary()? => {
            let from: Vec<u64> = m.iter().copied().collect();
            let mut picked: BTreeSet<u64> = (0..u.int_in_range(1..=20)?)
                .map(|_| u.choose(&from).copied())
                .collect::<Result<_>>()?;
            picked.extend(ids(u, 4)?);
            picked
        }
        _ => ids(u, 8)?.into_iter().collect(),
    };
    let mut load = vec![b"IDSET.LOAD".to_vec(), OTHER.to_vec(), b"IDS".to_vec()];
    load.extend(other.iter().map(|&i| arg(i)));
    let load: Vec<&[u8]> = load.iter().map(Vec::as_slice).collect();
    assert_eq!(call(&mut c, &load), int(other.len() as u64));

    for _ in 0..u.int_in_range(1..=8)? {
        let empty = BTreeSet::new();
        let set = members.as_ref().unwrap_or(&empty);
        let capacity = capacity(&mut c);
        match u.int_in_range(0u8..=7)? {
            0 => {
                let count = u.int_in_range(1..=capacity.max(1))?;
                let count = count.max(capacity / 2_000);
                let n = count.to_string();
                let seen = walk(&mut c, capacity / count + 2, count as usize, |c, cur| {
                    call(c, &[b"IDSET.SCAN", KEY, &arg(cur), b"COUNT", n.as_bytes()])
                });
                assert_eq!(seen.as_ref(), members.as_ref(), "IDSET.SCAN COUNT {n}");
            }
            1 => {
                let count = u.int_in_range(1..=64u64)?.max(capacity / 1_000);
                let n = count.to_string();
                let pattern = match u.int_in_range(0u8..=3)? {
                    0 => None,
                    1 => Some(format!("{}*", u.int_in_range(1..=9)?)),
                    2 => Some(format!("*{}", u.int_in_range(0..=9)?)),
                    _ => Some(format!("?*{}?", u.int_in_range(0..=9)?)),
                };
                let seen = walk(
                    &mut c,
                    capacity + 2,
                    count as usize,
                    |c, cur| match &pattern {
                        None => call(c, &[b"SSCAN", KEY, &arg(cur), b"COUNT", n.as_bytes()]),
                        Some(p) => call(
                            c,
                            &[
                                b"SSCAN",
                                KEY,
                                &arg(cur),
                                b"MATCH",
                                p.as_bytes(),
                                b"COUNT",
                                n.as_bytes(),
                            ],
                        ),
                    },
                )
                .expect("SSCAN of a missing key is an empty walk");
                let want: BTreeSet<u64> = set
                    .iter()
                    .copied()
                    .filter(|i| {
                        pattern
                            .as_ref()
                            .is_none_or(|p| glob(p.as_bytes(), &arg(*i)))
                    })
                    .collect();
                assert_eq!(seen, want, "SSCAN COUNT {n} MATCH {pattern:?}");
            }
            2 => {
                let got: BTreeSet<u64> = ids_of(&call(&mut c, &[b"SMEMBERS", KEY]))
                    .into_iter()
                    .collect();
                assert_eq!(&got, set, "SMEMBERS");
            }
            3 => {
                let (with, want): (&[u8], BTreeSet<u64>) = match u.int_in_range(0u8..=2)? {
                    0 => (OTHER, set.intersection(&other).copied().collect()),
                    1 => (KEY, set.clone()),
                    _ => (MISSING, BTreeSet::new()),
                };
                let got: BTreeSet<u64> = ids_of(&call(&mut c, &[b"SINTER", KEY, with]))
                    .into_iter()
                    .collect();
                assert_eq!(got, want, "SINTER {with:?}");
            }
            4 => {
                let probe = if !set.is_empty() && u.arbitrary()? {
                    *u.choose(&set.iter().copied().collect::<Vec<_>>())?
                } else {
                    id(u)?
                };
                let want = Frame::Array(vec![
                    members
                        .as_ref()
                        .map_or(Frame::Null, |m| int(m.contains(&probe).into())),
                    int(other.contains(&probe).into()),
                    Frame::Null,
                ]);
                let got = call(&mut c, &[b"IDSET.WHICH", &arg(probe), KEY, OTHER, MISSING]);
                assert_eq!(got, want, "IDSET.WHICH {probe}");
            }
            5 => {
                let mut probes = ids(u, 16)?;
                probes.extend(set.iter().take(16));
                let mut args = vec![b"IDSET.MEXISTS".to_vec(), KEY.to_vec()];
                args.extend(probes.iter().map(|&i| arg(i)));
                let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                let want = members.as_ref().map_or(Frame::Null, |m| {
                    Frame::Array(probes.iter().map(|i| int(m.contains(i).into())).collect())
                });
                assert_eq!(call(&mut c, &args), want, "IDSET.MEXISTS");
            }
            6 => {
                // Adds: the table may be rebuilt larger, or grow in place.
                let added = ids(u, 8)?;
                let mut args = vec![b"SADD".to_vec(), KEY.to_vec()];
                args.extend(added.iter().map(|&i| arg(i)));
                let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                let m = members.get_or_insert_with(BTreeSet::new);
                let n = added.iter().filter(|&&i| m.insert(i)).count();
                assert_eq!(call(&mut c, &args), int(n as u64), "SADD");
            }
            _ => {
                // Removes leave tombstones (IDSET.REM keeps an emptied set).
                let mut gone = ids(u, 4)?;
                gone.extend(set.iter().take(u.int_in_range(0..=64)?));
                let mut args = vec![b"IDSET.REM".to_vec(), KEY.to_vec()];
                args.extend(gone.iter().map(|&i| arg(i)));
                let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                let want = match &mut members {
                    None => Frame::Null,
                    Some(m) => int(gone.iter().filter(|&i| m.remove(i)).count() as u64),
                };
                assert_eq!(call(&mut c, &args), want, "IDSET.REM");
            }
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
