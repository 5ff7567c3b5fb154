//! A v1 container as Go's `encoding/json` writes it — fields in declaration order,
//! `omitempty` honoured, embedded structs flattened, map keys sorted, quantities in their
//! canonical form, `<`, `>` and `&` escaped — read from its JSON through the layout in
//! `v1_container.schema`. The kubelet hashes these bytes to tell whether a running
//! container still matches its spec.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::OnceLock;

use serde_json::Value;

use super::dump::Uncovered;
use super::quantity::Quantity;

struct Field {
    ty: String,
    /// The JSON name; empty for an embedded struct (flattened).
    name: String,
    omitempty: bool,
}

fn schema() -> &'static HashMap<String, Vec<Field>> {
    static SCHEMA: OnceLock<HashMap<String, Vec<Field>>> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let mut defs: HashMap<String, Vec<Field>> = HashMap::new();
        let mut current: Option<String> = None;
        for line in include_str!("v1_container.schema").lines() {
            if let Some(field) = line.strip_prefix(' ') {
                let mut parts = field.split('\t').skip(1);
                let (Some(ty), Some(tag)) = (parts.next(), parts.next()) else {
                    continue;
                };
                let mut tag = tag.split(',');
                let name = tag.next().unwrap_or_default().to_owned();
                let omitempty = tag.any(|t| t == "omitempty");
                if let Some(fields) = current.as_ref().and_then(|c| defs.get_mut(c)) {
                    fields.push(Field {
                        ty: ty.to_owned(),
                        name,
                        omitempty,
                    });
                }
            } else if let Some(name) = line.strip_prefix("struct ") {
                defs.insert(name.to_owned(), Vec::new());
                current = Some(name.to_owned());
            } else {
                current = None;
            }
        }
        defs
    })
}

/// The container's JSON as the kubelet marshals it.
pub fn container(c: &Value) -> Result<String, Uncovered> {
    let mut out = String::with_capacity(1024);
    value(&mut out, "v1.Container", c)?;
    Ok(out)
}

/// Whether `omitempty` leaves `v` (of type `ty`) out.
fn empty(ty: &str, v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        // A struct is never empty to encoding/json; a map is when it has no entries.
        Value::Object(o) => o.is_empty() && (ty.starts_with("map[") || ty == "v1.ResourceList"),
    }
}

fn value(out: &mut String, ty: &str, v: &Value) -> Result<(), Uncovered> {
    if let Some(elem) = ty.strip_prefix('*') {
        return if v.is_null() {
            out.push_str("null");
            Ok(())
        } else {
            value(out, elem, v)
        };
    }
    if let Some(elem) = ty.strip_prefix("[]") {
        let Value::Array(items) = v else {
            out.push_str("null");
            return Ok(());
        };
        out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            value(out, elem, item)?;
        }
        out.push(']');
        return Ok(());
    }
    match ty {
        // Every resource list of a pod is rounded up to milli-units by the defaults.
        "v1.ResourceList" => map(out, v, |out, q| quantity(out, q, true)),
        "resource.Quantity" => quantity(out, v, false),
        "intstr.IntOrString" => {
            match v {
                Value::Number(n) => out.push_str(&n.as_i64().ok_or(Uncovered)?.to_string()),
                Value::String(s) => string(out, s),
                _ => return Err(Uncovered),
            }
            Ok(())
        }
        "bool" => {
            out.push_str(if v.as_bool().unwrap_or(false) {
                "true"
            } else {
                "false"
            });
            Ok(())
        }
        "int32" | "int64" => {
            out.push_str(&v.as_i64().unwrap_or(0).to_string());
            Ok(())
        }
        _ if ty.starts_with("map[") => map(out, v, |out, s| value(out, "string", s)),
        _ => match schema().get(ty) {
            Some(fields) => {
                out.push('{');
                let mut first = true;
                object(out, fields, v, &mut first)?;
                out.push('}');
                Ok(())
            }
            // A named string type.
            None => {
                string(out, v.as_str().unwrap_or(""));
                Ok(())
            }
        },
    }
}

/// The members of a struct (an embedded one's among them).
fn object(
    out: &mut String,
    fields: &[Field],
    v: &Value,
    first: &mut bool,
) -> Result<(), Uncovered> {
    for f in fields {
        if f.name == "-" {
            continue;
        }
        if f.name.is_empty() {
            let inner = schema().get(&f.ty).ok_or(Uncovered)?;
            object(out, inner, v, first)?;
            continue;
        }
        let member = v.get(&f.name).unwrap_or(&Value::Null);
        // A struct value (not a pointer) is written even when empty, as its zero value.
        let is_struct = schema().contains_key(f.ty.as_str())
            || matches!(f.ty.as_str(), "resource.Quantity" | "intstr.IntOrString");
        // A pointer is left out only when nil (a pointer to false is written).
        let omitted = if f.ty.starts_with('*') {
            member.is_null()
        } else {
            empty(&f.ty, member)
        };
        if f.omitempty && !is_struct && omitted {
            continue;
        }
        if !*first {
            out.push(',');
        }
        *first = false;
        string(out, &f.name);
        out.push(':');
        match (member, f.ty.as_str()) {
            (Value::Null, "resource.Quantity") => out.push_str("\"0\""),
            (Value::Null, "intstr.IntOrString") => out.push('0'),
            _ => value(out, &f.ty, member)?,
        }
    }
    Ok(())
}

/// A map, keys sorted, each value written by `each`.
fn map(
    out: &mut String,
    v: &Value,
    mut each: impl FnMut(&mut String, &Value) -> Result<(), Uncovered>,
) -> Result<(), Uncovered> {
    let Value::Object(members) = v else {
        out.push_str("null");
        return Ok(());
    };
    let mut keys: Vec<&String> = members.keys().collect();
    keys.sort();
    out.push('{');
    for (i, k) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        string(out, k);
        out.push(':');
        each(out, &members[k])?;
    }
    out.push('}');
    Ok(())
}

/// A quantity in its canonical form (rounded to milli-units for a resource list's).
fn quantity(out: &mut String, v: &Value, rounded: bool) -> Result<(), Uncovered> {
    let q = Quantity::of_json(v, rounded).ok_or(Uncovered)?;
    string(out, &q.canonical());
    Ok(())
}

/// A JSON string as Go 1.21's encoder writes it (HTML characters escaped).
pub(super) fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
