//! Two of the libraries Redis bundles that real scripts use: `cjson` (JSON, here
//! through serde_json) and `bit` (LuaBitOp's 32-bit operations). `struct` and
//! `cmsgpack` are not there (the README says so).

use mlua::{LightUserData, Lua, Table, Value};
use serde_json::Value as Json;

/// `cjson.encode`, `cjson.decode`, `cjson.null`.
pub(super) fn cjson(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("null", null())?;
    t.raw_set(
        "encode",
        lua.create_function(|_, v: Value| {
            let json = to_json(&v, 0)?;
            Ok(json.to_string())
        })?,
    )?;
    t.raw_set(
        "decode",
        lua.create_function(|lua, s: mlua::String| {
            let json: Json = serde_json::from_slice(&s.as_bytes()).map_err(|e| {
                mlua::Error::runtime(format!("Expected value but found invalid token: {e}"))
            })?;
            from_json(lua, json)
        })?,
    )?;
    Ok(t)
}

/// cjson's null: a light userdata holding a null pointer.
fn null() -> LightUserData {
    LightUserData(std::ptr::null_mut())
}

fn to_json(v: &Value, depth: usize) -> mlua::Result<Json> {
    if depth > 1000 {
        return Err(mlua::Error::runtime(
            "Cannot serialise, excessive nesting (1001)",
        ));
    }
    Ok(match v {
        Value::Nil => Json::Null,
        Value::LightUserData(u) if u.0.is_null() => Json::Null,
        Value::Boolean(b) => Json::Bool(*b),
        Value::Integer(n) => Json::from(*n),
        Value::Number(n) if n.fract() == 0.0 && n.abs() < 1e15 => Json::from(*n as i64),
        Value::Number(n) => serde_json::Number::from_f64(*n)
            .map(Json::Number)
            .ok_or_else(|| {
                mlua::Error::runtime("Cannot serialise number: must not be NaN or Inf")
            })?,
        Value::String(s) => Json::String(s.to_string_lossy()),
        Value::Table(t) => {
            // An array when its keys are exactly 1..n (n > 0); otherwise an object.
            let len = t.raw_len();
            let count = t.pairs::<Value, Value>().count();
            if len > 0 && count == len {
                let mut items = Vec::with_capacity(len);
                for i in 1..=len {
                    items.push(to_json(&t.raw_get::<Value>(i)?, depth + 1)?);
                }
                Json::Array(items)
            } else {
                let mut map = serde_json::Map::new();
                for pair in t.pairs::<Value, Value>() {
                    let (k, v) = pair?;
                    let key = match k {
                        Value::String(s) => s.to_string_lossy(),
                        Value::Integer(n) => n.to_string(),
                        Value::Number(n) => n.to_string(),
                        _ => {
                            return Err(mlua::Error::runtime(
                                "Cannot serialise table: table key must be a number or string",
                            ))
                        }
                    };
                    map.insert(key, to_json(&v, depth + 1)?);
                }
                Json::Object(map)
            }
        }
        other => {
            return Err(mlua::Error::runtime(format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            )))
        }
    })
}

fn from_json(lua: &Lua, json: Json) -> mlua::Result<Value> {
    Ok(match json {
        Json::Null => Value::LightUserData(null()),
        Json::Bool(b) => Value::Boolean(b),
        Json::Number(n) => Value::Number(n.as_f64().unwrap_or(0.0)),
        Json::String(s) => Value::String(lua.create_string(s)?),
        Json::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, from_json(lua, item)?)?;
            }
            Value::Table(t)
        }
        Json::Object(map) => {
            let t = lua.create_table_with_capacity(0, map.len())?;
            for (k, v) in map {
                t.raw_set(k, from_json(lua, v)?)?;
            }
            Value::Table(t)
        }
    })
}

/// LuaBitOp: every operation on the low 32 bits, results signed.
pub(super) fn bit(lua: &Lua) -> mlua::Result<Table> {
    fn tobit(n: f64) -> i32 {
        // LuaBitOp's rule: the number modulo 2^32, as a signed 32-bit integer.
        (n.rem_euclid(4_294_967_296.0) as u64 as u32) as i32
    }
    let t = lua.create_table()?;
    let fold = |f: fn(i32, i32) -> i32| {
        move |_: &Lua, args: mlua::Variadic<f64>| {
            let mut it = args.iter().map(|&n| tobit(n));
            let first = it.next().ok_or_else(|| {
                mlua::Error::runtime("bad argument #1 (number expected, got no value)")
            })?;
            Ok(it.fold(first, f))
        }
    };
    t.raw_set("tobit", lua.create_function(|_, n: f64| Ok(tobit(n)))?)?;
    t.raw_set("bnot", lua.create_function(|_, n: f64| Ok(!tobit(n)))?)?;
    t.raw_set("band", lua.create_function(fold(|a, b| a & b))?)?;
    t.raw_set("bor", lua.create_function(fold(|a, b| a | b))?)?;
    t.raw_set("bxor", lua.create_function(fold(|a, b| a ^ b))?)?;
    let shift = |f: fn(i32, u32) -> i32| {
        move |_: &Lua, (n, by): (f64, f64)| Ok(f(tobit(n), (tobit(by) & 31) as u32))
    };
    t.raw_set(
        "lshift",
        lua.create_function(shift(|a, s| ((a as u32) << s) as i32))?,
    )?;
    t.raw_set(
        "rshift",
        lua.create_function(shift(|a, s| ((a as u32) >> s) as i32))?,
    )?;
    t.raw_set("arshift", lua.create_function(shift(|a, s| a >> s))?)?;
    t.raw_set(
        "rol",
        lua.create_function(shift(|a, s| (a as u32).rotate_left(s) as i32))?,
    )?;
    t.raw_set(
        "ror",
        lua.create_function(shift(|a, s| (a as u32).rotate_right(s) as i32))?,
    )?;
    t.raw_set(
        "bswap",
        lua.create_function(|_, n: f64| Ok(tobit(n).swap_bytes()))?,
    )?;
    t.raw_set(
        "tohex",
        lua.create_function(|_, (n, digits): (f64, Option<f64>)| {
            let v = tobit(n) as u32;
            let d = digits.map(|d| d as i32).unwrap_or(8);
            let width = d.unsigned_abs().clamp(1, 8) as usize;
            let masked = if width == 8 {
                v
            } else {
                v & ((1u32 << (4 * width)) - 1)
            };
            Ok(if d < 0 {
                format!("{masked:0width$X}")
            } else {
                format!("{masked:0width$x}")
            })
        })?,
    )?;
    Ok(t)
}
