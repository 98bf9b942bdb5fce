//! CLIENT TRACKING, CACHING, GETREDIR and TRACKINGINFO: client-side caching's
//! commands. Their specs sit in the CLIENT table (`connection.rs`); the state
//! and the invalidations are `crate::tracking`'s.

use bytes::Bytes;
use relcache_protocol::resp::Frame;

use super::{eq_ic, parse_i64_opt, Ctx};
use crate::error::{CmdError, CmdResult};
use crate::tracking::{self, Options};

/// CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p]... [BCAST] [OPTIN] [OPTOUT]
/// [NOLOOP], with Redis's checks in Redis's order.
pub(super) fn client_tracking(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let mut opts = Options::default();
    let mut i = 3;
    while i < args.len() {
        let more = i + 1 < args.len();
        let a = &args[i];
        if eq_ic(a, "redirect") && more {
            i += 1;
            if opts.redirect != 0 {
                return Err(CmdError::err(
                    "A client can only redirect to a single other client",
                ));
            }
            let id = parse_i64_opt(args[i]).ok_or(CmdError::NotInteger)?;
            if ctx.server.clients.get(id).is_none() {
                return Err(CmdError::err(
                    "The client ID you want redirect to does not exist",
                ));
            }
            opts.redirect = id as u64;
        } else if eq_ic(a, "bcast") {
            opts.bcast = true;
        } else if eq_ic(a, "optin") {
            opts.optin = true;
        } else if eq_ic(a, "optout") {
            opts.optout = true;
        } else if eq_ic(a, "noloop") {
            opts.noloop = true;
        } else if eq_ic(a, "prefix") && more {
            i += 1;
            // Kept while tracking lasts: a copy, not a slice of the read buffer.
            opts.prefixes.push(Bytes::copy_from_slice(args[i]));
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if eq_ic(args[2], "on") {
        check_on(ctx, &opts)?;
        tracking::enable(ctx.server, ctx.session, opts);
    } else if eq_ic(args[2], "off") {
        tracking::disable(ctx.server, ctx.session);
    } else {
        return Err(CmdError::Syntax);
    }
    Ok(Frame::ok())
}

fn check_on(ctx: &Ctx<'_, '_>, opts: &Options) -> Result<(), CmdError> {
    if !opts.bcast && !opts.prefixes.is_empty() {
        return Err(CmdError::err(
            "PREFIX option requires BCAST mode to be enabled",
        ));
    }
    let current = ctx.session.tracking.as_deref();
    if current.is_some_and(|t| t.bcast() != opts.bcast) {
        return Err(CmdError::err(
            "You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.",
        ));
    }
    if opts.bcast && (opts.optin || opts.optout) {
        return Err(CmdError::err(
            "OPTIN and OPTOUT are not compatible with BCAST",
        ));
    }
    if opts.optin && opts.optout {
        return Err(CmdError::err(
            "You can't specify both OPTIN mode and OPTOUT mode",
        ));
    }
    if current.is_some_and(|t| (opts.optin && t.optout) || (opts.optout && t.optin)) {
        return Err(CmdError::err(
            "You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.",
        ));
    }
    if opts.bcast {
        check_prefixes(current.map_or(&[][..], |t| &t.prefixes), &opts.prefixes)?;
    }
    Ok(())
}

/// One client's prefixes must not overlap (a key would then be announced
/// twice): neither a new prefix and one it has, nor two new ones.
fn check_prefixes(have: &[Bytes], new: &[Bytes]) -> Result<(), CmdError> {
    let overlap = |a: &[u8], b: &[u8]| a.starts_with(b) || b.starts_with(a);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for (i, p) in new.iter().enumerate() {
        if let Some(h) = have.iter().find(|h| overlap(h, p)) {
            return Err(CmdError::err(format!(
                "Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                text(p),
                text(h)
            )));
        }
        if let Some(q) = new[i + 1..].iter().find(|q| overlap(p, q)) {
            return Err(CmdError::err(format!(
                "Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                text(p),
                text(q)
            )));
        }
    }
    Ok(())
}

/// CLIENT CACHING YES|NO: whether the next command's reads are remembered.
pub(super) fn client_caching(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let Some(t) = ctx.session.tracking.as_deref_mut() else {
        return Err(CmdError::err(
            "CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled",
        ));
    };
    if eq_ic(args[2], "yes") {
        if !t.optin {
            return Err(CmdError::err(
                "CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
            ));
        }
    } else if eq_ic(args[2], "no") {
        if !t.optout {
            return Err(CmdError::err(
                "CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
            ));
        }
    } else {
        return Err(CmdError::Syntax);
    }
    t.caching = true;
    Ok(Frame::ok())
}

/// CLIENT GETREDIR: -1 when not tracking, 0 when not redirecting.
pub(super) fn client_getredir(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    Ok(Frame::Integer(
        ctx.session
            .tracking
            .as_deref()
            .map_or(-1, |t| t.redirect() as i64),
    ))
}

pub(super) fn client_trackinginfo(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    let bulk = |s: &'static str| Frame::Bulk(Bytes::from_static(s.as_bytes()));
    let t = ctx.session.tracking.as_deref();
    let mut flags = vec![bulk(if t.is_some() { "on" } else { "off" })];
    let mut redirect = -1;
    let mut prefixes = Vec::new();
    if let Some(t) = t {
        if t.bcast() {
            flags.push(bulk("bcast"));
        }
        if t.optin {
            flags.push(bulk("optin"));
            if t.caching {
                flags.push(bulk("caching-yes"));
            }
        }
        if t.optout {
            flags.push(bulk("optout"));
            if t.caching {
                flags.push(bulk("caching-no"));
            }
        }
        if t.noloop() {
            flags.push(bulk("noloop"));
        }
        let bits = ctx
            .session
            .info
            .tracking
            .load(std::sync::atomic::Ordering::Relaxed);
        if bits & tracking::FLAG_BROKEN_REDIRECT != 0 {
            flags.push(bulk("broken_redirect"));
        }
        redirect = t.redirect() as i64;
        // Redis lists them from its radix tree: in byte order.
        let mut p = t.prefixes.clone();
        p.sort_unstable();
        prefixes = p.into_iter().map(Frame::Bulk).collect();
    }
    Ok(Frame::Map(vec![
        (bulk("flags"), Frame::Set(flags)),
        (bulk("redirect"), Frame::Integer(redirect)),
        (bulk("prefixes"), Frame::Array(prefixes)),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(v: &[&str]) -> Vec<Bytes> {
        v.iter()
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect()
    }

    #[test]
    fn prefixes_of_one_client_never_overlap() {
        assert!(check_prefixes(&b(&["a"]), &b(&["b", "c"])).is_ok());
        let e = check_prefixes(&b(&["user:"]), &b(&["user:1"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ERR Prefix 'user:1' overlaps with an existing prefix 'user:'. Prefixes for a single client must not overlap."
        );
        let e = check_prefixes(&[], &b(&["ab", "a"])).unwrap_err();
        assert!(e.to_string().contains("another provided prefix 'a'"), "{e}");
        // The empty prefix covers everything.
        assert!(check_prefixes(&b(&[""]), &b(&["x"])).is_err());
    }
}
