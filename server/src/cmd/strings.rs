//! The string family. (Being written: GET and a plain SET for now.)

use bytes::Bytes;
use relcache_protocol::resp::Frame;

use super::spec::{self, CommandSpec, Group, Keys};
use super::Ctx;
use crate::db::Value;
use crate::error::CmdResult;

pub(super) const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "get",
        arity: 2,
        flags: spec::READONLY | spec::FAST,
        keys: Keys::ONE,
        group: Group::String,
        summary: "Returns the string value of a key.",
        handler: get,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "set",
        arity: -3,
        flags: spec::WRITE | spec::DENYOOM,
        keys: Keys::ONE,
        group: Group::String,
        summary: "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.",
        handler: set,
        ..CommandSpec::DEFAULT
    },
];

fn get(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    match ctx.view().get(&args[1]) {
        Some(e) => Ok(Frame::Bulk(e.value().as_str()?.clone())),
        None => Ok(Frame::Null),
    }
}

fn set(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> CmdResult {
    let value = Value::Str(Bytes::copy_from_slice(&args[2]));
    ctx.view().insert(&args[1], value, 0);
    Ok(Frame::ok())
}
