//! CONFIG (GET, SET, RESETSTAT, REWRITE, HELP): the command side of
//! [`crate::config`], whose parameter table validates and applies every value.
//!
//! CONFIG SET is all or nothing, and CONFIG REWRITE edits the config file in place
//! the way Redis does, keeping comments and unknown lines.

use std::collections::HashSet;
use std::path::Path;

use relcache_protocol::resp::Frame;

use super::introspect::help_reply;
use super::memory::used_memory;
use super::spec::{self, CommandSpec, Group};
use super::Ctx;
use crate::config::{split_args, Config, ConfigError, PARAMS};
use crate::error::{CmdError, CmdResult};

pub(super) const COMMANDS: &[CommandSpec] = &[CommandSpec {
    name: "config",
    arity: -2,
    group: Group::Server,
    since: "2.0.0",
    summary: "A container for server configuration commands.",
    complexity: "Depends on subcommand.",
    subcommands: CONFIG_SUBCOMMANDS,
    ..CommandSpec::DEFAULT
}];

const CONFIG_ADMIN: u32 = spec::ADMIN | spec::NOSCRIPT | spec::LOADING | spec::STALE;

const CONFIG_SUBCOMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "config|get",
        arity: -3,
        flags: CONFIG_ADMIN,
        group: Group::Server,
        since: "2.0.0",
        summary: "Returns the effective values of configuration parameters.",
        complexity: "O(N) when N is the number of configuration parameters provided",
        handler: config_get,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "config|set",
        arity: -4,
        flags: CONFIG_ADMIN,
        group: Group::Server,
        since: "2.0.0",
        summary: "Sets configuration parameters in-flight.",
        complexity: "O(N) when N is the number of configuration parameters provided",
        handler: config_set,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "config|resetstat",
        arity: 2,
        flags: CONFIG_ADMIN,
        group: Group::Server,
        since: "2.0.0",
        summary: "Resets the server's statistics.",
        handler: config_resetstat,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "config|rewrite",
        arity: 2,
        flags: CONFIG_ADMIN,
        group: Group::Server,
        since: "2.8.0",
        summary: "Persists the effective configuration to file.",
        handler: config_rewrite,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "config|help",
        arity: 2,
        flags: spec::LOADING | spec::STALE,
        group: Group::Server,
        since: "5.0.0",
        summary: "Returns helpful text about the different subcommands.",
        handler: config_help,
        ..CommandSpec::DEFAULT
    },
];

fn config_get(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let patterns: Vec<&[u8]> = args[2..].iter().map(|a| &a[..]).collect();
    let pairs = ctx.server.config.get_matching(&patterns);
    Ok(Frame::Map(
        pairs
            .into_iter()
            .map(|(name, value)| (Frame::bulk(name), Frame::bulk(value)))
            .collect(),
    ))
}

/// `CONFIG SET name value [name value …]`: every name is checked (known, mutable,
/// not repeated) and every value validated before anything changes; if applying one
/// still fails, the ones already applied are restored, so the command takes effect
/// entirely or not at all.
fn config_set(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    if !args.len().is_multiple_of(2) {
        return Err(CmdError::Syntax);
    }
    let pairs: Vec<(String, String)> = args[2..]
        .chunks(2)
        .map(|p| {
            (
                String::from_utf8_lossy(p[0]).into_owned(),
                String::from_utf8_lossy(p[1]).into_owned(),
            )
        })
        .collect();

    // Names first, as Redis: the first problem found wins, but an unknown name is
    // reported only if nothing before it was already wrong.
    let mut params = Vec::with_capacity(pairs.len());
    let mut problem: Option<ConfigError> = None;
    for (name, _) in &pairs {
        let Some(p) = PARAMS.iter().find(|p| p.name.eq_ignore_ascii_case(name)) else {
            problem.get_or_insert_with(|| ConfigError::Unknown(name.clone()));
            continue;
        };
        if problem.is_some() {
            continue;
        }
        let why = if !p.mutable {
            "can't set immutable config"
        } else if p.protected {
            "can't set protected config"
        } else if params
            .iter()
            .any(|q: &&crate::config::Param| q.name == p.name)
        {
            "duplicate parameter"
        } else {
            params.push(p);
            continue;
        };
        problem = Some(ConfigError::Invalid {
            name: name.clone(),
            why: why.into(),
        });
    }
    if let Some(e) = problem {
        return Err(CmdError::err(e.to_string()));
    }

    // Values: validated on a scratch configuration, so a bad value changes nothing.
    let scratch = Config::default();
    for (p, (_, value)) in params.iter().zip(&pairs) {
        scratch
            .set(p.name, value, false)
            .map_err(|e| CmdError::err(e.to_string()))?;
    }

    let config = &ctx.server.config;
    let backup: Vec<String> = params
        .iter()
        .map(|p| config.get(p.name).unwrap_or_default())
        .collect();
    for (i, (p, (_, value))) in params.iter().zip(&pairs).enumerate() {
        if let Err(e) = config.set(p.name, value, false) {
            for (q, old) in params[..i].iter().zip(&backup) {
                let _ = config.set(q.name, old, true);
            }
            return Err(CmdError::err(e.to_string()));
        }
    }

    // A lower maxmemory takes effect now, as in Redis, not at the next write. Inside
    // EXEC the transaction holds shard locks the evictor would need: the next
    // write after it evicts instead.
    if params.iter().any(|p| p.name == "maxmemory") && !ctx.in_exec() {
        let _ = ctx.server.make_room(crate::server::Room::All);
    }
    Ok(Frame::ok())
}

fn config_resetstat(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    let server = ctx.server;
    server.stats.reset();
    server.over_limit.reset();
    server.cmdstats.iter().for_each(|s| s.reset());
    server.observe.reset_stats();
    crate::alloc::reset_peak();
    used_memory();
    Ok(Frame::ok())
}

fn config_rewrite(ctx: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    let path = ctx.server.config.config_file.read().clone();
    let Some(path) = path else {
        return Err(CmdError::err("The server is running without a config file"));
    };
    rewrite_config_file(&ctx.server.config, &path).map_err(|e| {
        tracing::warn!(path = %path.display(), error = %e, "CONFIG REWRITE failed");
        CmdError::err(format!("Rewriting config file: {e}"))
    })?;
    tracing::info!(path = %path.display(), "CONFIG REWRITE executed with success");
    Ok(Frame::ok())
}

/// Quotes a config value the way `split_args` reads it back.
fn quote_config_value(v: &str) -> String {
    let plain = !v.is_empty()
        && !v
            .chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '\'' || c == '\\');
    if plain {
        return v.to_string();
    }
    let mut q = String::with_capacity(v.len() + 2);
    q.push('"');
    for c in v.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\r' => q.push_str("\\r"),
            '\t' => q.push_str("\\t"),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// Rewrites the config file as Redis does: lines of known parameters get their
/// current value in place (repeats of a parameter are dropped), every other line
/// (comments, unknown directives) stays as it was, and parameters that differ from
/// their default and are not in the file yet are appended under a marker. The new
/// file replaces the old one with a rename, so a crash never leaves half a file.
fn rewrite_config_file(config: &Config, path: &Path) -> std::io::Result<()> {
    const MARKER: &str = "# Generated by CONFIG REWRITE";
    let old = match std::fs::read_to_string(path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let line_for = |name: &str| {
        format!(
            "{name} {}\n",
            quote_config_value(&config.get(name).unwrap_or_default())
        )
    };
    let mut seen = HashSet::new();
    let mut marked = false;
    let mut out = String::with_capacity(old.len() + 256);
    for line in old.lines() {
        let trimmed = line.trim();
        // The marker is kept where it is, and written only once.
        marked |= trimmed == MARKER;
        let first = if trimmed.starts_with('#') {
            None
        } else {
            split_args(trimmed).and_then(|w| w.into_iter().next())
        };
        match first.and_then(|n| PARAMS.iter().find(|p| p.name.eq_ignore_ascii_case(&n))) {
            Some(p) => {
                if seen.insert(p.name) {
                    out.push_str(&line_for(p.name));
                }
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    let defaults = Config::default();
    for p in PARAMS.iter().filter(|p| !seen.contains(p.name)) {
        if config.get(p.name) == defaults.get(p.name) {
            continue;
        }
        if !marked {
            out.push_str(MARKER);
            out.push('\n');
            marked = true;
        }
        out.push_str(&line_for(p.name));
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    std::fs::write(&tmp, out)?;
    std::fs::rename(&tmp, path)
}

fn config_help(_: &mut Ctx<'_, '_>, _: &[&[u8]]) -> CmdResult {
    Ok(help_reply(
        "CONFIG",
        &[
            "GET <pattern>",
            "    Return parameters matching the glob-like <pattern> and their values.",
            "SET <directive> <value>",
            "    Set the configuration <directive> to <value>.",
            "RESETSTAT",
            "    Reset statistics reported by the INFO command.",
            "REWRITE",
            "    Rewrite the configuration file.",
        ],
    ))
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_values_round_trip_through_quoting() {
        for v in ["", "plain", "a b", "say \"hi\"", "back\\slash", "new\nline"] {
            let line = format!("requirepass {}", quote_config_value(v));
            assert_eq!(split_args(&line).unwrap(), ["requirepass", v], "{line}");
        }
    }

    #[test]
    fn rewrite_keeps_comments_and_updates_values() {
        let dir = std::env::temp_dir().join(format!("relcache-rewrite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("redis.conf");
        std::fs::write(
            &path,
            "# my cache\nmaxclients 7\nunknown-directive 1\nmaxclients 8\n",
        )
        .unwrap();
        let c = Config::default();
        c.set("maxclients", "9", false).unwrap();
        c.set("requirepass", "p w", false).unwrap();
        rewrite_config_file(&c, &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "# my cache\nmaxclients 9\nunknown-directive 1\n# Generated by CONFIG REWRITE\nrequirepass \"p w\"\n"
        );
        // Rewriting again is stable, and the file loads back to the same values.
        rewrite_config_file(&c, &path).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
