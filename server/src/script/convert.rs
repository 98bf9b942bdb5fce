//! Replies to Lua values and Lua values to replies, as Redis 7 converts them.
//!
//! A command's reply reaches the script shaped by the protocol the script chose
//! with `redis.setresp` (2 by default): in RESP2 a map is a flat array and a
//! double a string, in RESP3 they are `{map=…}` and `{double=…}`. What a script
//! returns goes the other way; its booleans depend on that choice too.

use bytes::Bytes;
use mlua::{Lua, Table, Value};
use relcache_protocol::resp::Frame;

/// The protocol a script sees its commands' replies in (`redis.setresp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resp {
    Two,
    Three,
}

/// A command's reply as the script sees it. Errors become `{err=…}`.
pub fn frame_to_lua(lua: &Lua, frame: Frame, resp: Resp) -> mlua::Result<Value> {
    let resp3 = resp == Resp::Three;
    Ok(match frame {
        Frame::Simple(s) => single(lua, "ok", Value::String(lua.create_string(&s)?))?,
        Frame::Error(s) => single(lua, "err", Value::String(lua.create_string(&s)?))?,
        Frame::Integer(n) => Value::Integer(n as mlua::Integer),
        Frame::Bulk(b) => Value::String(lua.create_string(&b)?),
        Frame::Null | Frame::NullArray if resp3 => Value::Nil,
        Frame::Null | Frame::NullArray => Value::Boolean(false),
        Frame::Array(items) | Frame::Push(items) => array(lua, items, resp)?,
        Frame::Integers(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, n) in items.into_iter().enumerate() {
                t.raw_set(i + 1, n as mlua::Integer)?;
            }
            Value::Table(t)
        }
        Frame::Set(items) if resp3 => {
            let set = lua.create_table()?;
            for item in items {
                set.raw_set(frame_to_lua(lua, item, resp)?, true)?;
            }
            single(lua, "set", Value::Table(set))?
        }
        Frame::Set(items) => array(lua, items, resp)?,
        Frame::Map(pairs) if resp3 => {
            let map = lua.create_table()?;
            for (k, v) in pairs {
                map.raw_set(frame_to_lua(lua, k, resp)?, frame_to_lua(lua, v, resp)?)?;
            }
            single(lua, "map", Value::Table(map))?
        }
        Frame::Map(pairs) => {
            let flat = pairs.into_iter().flat_map(|(k, v)| [k, v]).collect();
            array(lua, flat, resp)?
        }
        Frame::Double(d) if resp3 => single(lua, "double", Value::Number(d))?,
        Frame::Double(d) => Value::String(lua.create_string(double_text(d))?),
        Frame::Boolean(b) if resp3 => Value::Boolean(b),
        Frame::Boolean(b) => Value::Integer(mlua::Integer::from(b)),
        Frame::BigNumber(n) if resp3 => {
            single(lua, "big_number", Value::String(lua.create_string(&n)?))?
        }
        Frame::BigNumber(n) => Value::String(lua.create_string(&n)?),
        Frame::Verbatim { format, text } if resp3 => {
            let v = lua.create_table()?;
            v.raw_set("format", lua.create_string(format)?)?;
            v.raw_set("string", lua.create_string(&text)?)?;
            single(lua, "verbatim_string", Value::Table(v))?
        }
        Frame::Verbatim { text, .. } => Value::String(lua.create_string(&text)?),
    })
}

fn double_text(d: f64) -> String {
    if d.is_nan() {
        "nan".into()
    } else if d.is_infinite() {
        if d > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        let mut buf = ryu::Buffer::new();
        buf.format(d).trim_end_matches(".0").to_string()
    }
}

fn single(lua: &Lua, key: &str, value: Value) -> mlua::Result<Value> {
    let t = lua.create_table_with_capacity(0, 1)?;
    t.raw_set(key, value)?;
    Ok(Value::Table(t))
}

fn array(lua: &Lua, items: Vec<Frame>, resp: Resp) -> mlua::Result<Value> {
    let t = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.into_iter().enumerate() {
        t.raw_set(i + 1, frame_to_lua(lua, item, resp)?)?;
    }
    Ok(Value::Table(t))
}

/// What a script returned, as the reply its client gets.
pub fn lua_to_frame(value: &Value, resp: Resp) -> Frame {
    match value {
        Value::Nil => Frame::Null,
        Value::Boolean(b) => match resp {
            Resp::Three => Frame::Boolean(*b),
            Resp::Two if *b => Frame::Integer(1),
            Resp::Two => Frame::Null,
        },
        Value::Integer(n) => Frame::Integer(*n),
        Value::Number(n) => Frame::Integer(number_to_integer(*n)),
        Value::String(s) => Frame::Bulk(Bytes::copy_from_slice(&s.as_bytes())),
        Value::Table(t) => table_to_frame(t, resp),
        // Functions, userdata, threads: Redis answers a null.
        _ => Frame::Null,
    }
}

/// Lua's number to a reply integer, truncated as C's cast does on x86: NaN and
/// out-of-range values are the smallest i64 (what redis-server answers).
pub fn number_to_integer(n: f64) -> i64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if n.is_finite() && (-TWO_63..TWO_63).contains(&n) {
        n as i64
    } else {
        i64::MIN
    }
}

fn string_field(t: &Table, key: &str) -> Option<Bytes> {
    match t.raw_get::<Value>(key).ok()? {
        Value::String(s) => Some(Bytes::copy_from_slice(&s.as_bytes())),
        _ => None,
    }
}

fn table_to_frame(t: &Table, resp: Resp) -> Frame {
    if let Some(err) = string_field(t, "err") {
        return Frame::error(err);
    }
    if let Some(ok) = string_field(t, "ok") {
        return Frame::simple(ok);
    }
    match t.raw_get::<Value>("double") {
        Ok(Value::Number(d)) => return Frame::Double(d),
        Ok(Value::Integer(d)) => return Frame::Double(d as f64),
        _ => {}
    }
    if let Some(n) = string_field(t, "big_number") {
        return Frame::BigNumber(n);
    }
    if let Ok(Value::Table(m)) = t.raw_get::<Value>("map") {
        let pairs = m
            .pairs::<Value, Value>()
            .filter_map(Result::ok)
            .map(|(k, v)| (lua_to_frame(&k, resp), lua_to_frame(&v, resp)))
            .collect();
        return Frame::Map(pairs);
    }
    if let Ok(Value::Table(s)) = t.raw_get::<Value>("set") {
        let items = s
            .pairs::<Value, Value>()
            .filter_map(Result::ok)
            .map(|(k, _)| lua_to_frame(&k, resp))
            .collect();
        return Frame::Set(items);
    }
    if let Ok(Value::Table(v)) = t.raw_get::<Value>("verbatim_string") {
        if let (Some(format), Some(text)) = (string_field(&v, "format"), string_field(&v, "string"))
        {
            if let Ok(format) = <[u8; 3]>::try_from(&format[..]) {
                return Frame::Verbatim { format, text };
            }
        }
    }
    // An array, up to the first nil.
    let mut items = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(v) => items.push(lua_to_frame(&v, resp)),
        }
    }
    Frame::Array(items)
}
