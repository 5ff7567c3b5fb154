//! The printed form of the internal pod the kubelet hashes: every field of every struct
//! in declaration order, each with its Go type in parentheses, nil pointers, slices and
//! maps as `<nil>`, map keys sorted, strings as they are — read from the v1 pod's JSON
//! through the layout in `core_pod.schema`.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value;

use super::quantity::Quantity;

/// Where a struct field's value is in the v1 JSON.
#[derive(Debug)]
enum Json {
    /// The member of this name.
    Member(String),
    /// The same object (an embedded struct).
    Inline,
    /// Never in JSON.
    Absent,
}

#[derive(Debug)]
struct Field {
    name: String,
    ty: String,
    json: Json,
}

#[derive(Debug)]
enum Def {
    Struct(Vec<Field>),
    /// A named type over a basic kind or a map (its underlying type).
    Named(String),
    /// Printed by hand: quantities, int-or-strings, times.
    Special,
}

/// The types of `core_pod.schema`, by name.
fn schema() -> &'static HashMap<String, Def> {
    static SCHEMA: OnceLock<HashMap<String, Def>> = OnceLock::new();
    SCHEMA.get_or_init(|| parse(include_str!("core_pod.schema")))
}

fn parse(text: &str) -> HashMap<String, Def> {
    let mut defs = HashMap::new();
    let mut current: Option<(String, Vec<Field>)> = None;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        if let Some(field) = line.strip_prefix(' ') {
            let mut parts = field.split('\t');
            let (Some(name), Some(ty), Some(json)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let json = match json {
                "<inline>" => Json::Inline,
                "-" => Json::Absent,
                name => Json::Member(name.to_owned()),
            };
            if let Some((_, fields)) = current.as_mut() {
                fields.push(Field {
                    name: name.to_owned(),
                    ty: ty.to_owned(),
                    json,
                });
            }
            continue;
        }
        if let Some((name, fields)) = current.take() {
            defs.insert(name, Def::Struct(fields));
        }
        let mut words = line.splitn(3, ' ');
        match (words.next(), words.next(), words.next()) {
            (Some("struct"), Some(name), None) => current = Some((name.to_owned(), Vec::new())),
            (Some("named"), Some(name), Some(under)) => {
                defs.insert(name.to_owned(), Def::Named(under.to_owned()));
            }
            (Some("special"), Some(name), None) => {
                defs.insert(name.to_owned(), Def::Special);
            }
            _ => {}
        }
    }
    if let Some((name, fields)) = current {
        defs.insert(name, Def::Struct(fields));
    }
    defs
}

/// A value the printing does not cover (the UID cannot be the kubelet's).
#[derive(Debug)]
pub struct Uncovered;

/// Prints `pod` (v1 JSON, defaulted, host fields moved) as the internal `*core.Pod`.
pub fn pod(pod: &Value) -> Result<String, Uncovered> {
    let mut out = String::with_capacity(8192);
    out.push_str("(*core.Pod)");
    value(&mut out, "core.Pod", Some(pod))?;
    Ok(out)
}

/// The zero-or-absent test: JSON `null` is absent.
fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

/// Prints the value of type `ty` (without its type prefix).
fn value(out: &mut String, ty: &str, v: Option<&Value>) -> Result<(), Uncovered> {
    let v = present(v);
    if let Some(elem) = ty.strip_prefix('*') {
        return match v {
            None => {
                out.push_str("<nil>");
                Ok(())
            }
            Some(v) => value(out, elem, Some(v)),
        };
    }
    if let Some(elem) = ty.strip_prefix("[]") {
        let Some(v) = v else {
            out.push_str("<nil>");
            return Ok(());
        };
        let items = v.as_array().ok_or(Uncovered)?;
        out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            value(out, elem, Some(item))?;
        }
        out.push(']');
        return Ok(());
    }
    if let Some(rest) = ty.strip_prefix("map[") {
        let close = rest.find(']').ok_or(Uncovered)?;
        let elem = &rest[close + 1..];
        return map(out, v, |out, item| value(out, elem, item));
    }
    match ty {
        "string" => out.push_str(v.map_or(Some(""), Value::as_str).ok_or(Uncovered)?),
        "bool" => out.push_str(if v.map_or(Some(false), Value::as_bool).ok_or(Uncovered)? {
            "true"
        } else {
            "false"
        }),
        "int32" | "int64" | "int" => {
            let n = v.map_or(Some(0), Value::as_i64).ok_or(Uncovered)?;
            out.push_str(&n.to_string());
        }
        _ => return named(out, ty, v),
    }
    Ok(())
}

/// A map, keys sorted, each value printed by `each`.
fn map(
    out: &mut String,
    v: Option<&Value>,
    mut each: impl FnMut(&mut String, Option<&Value>) -> Result<(), Uncovered>,
) -> Result<(), Uncovered> {
    let Some(v) = v else {
        out.push_str("<nil>");
        return Ok(());
    };
    let members = v.as_object().ok_or(Uncovered)?;
    let mut keys: Vec<&String> = members.keys().collect();
    keys.sort();
    out.push_str("map[");
    for (i, k) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(k);
        out.push(':');
        each(out, present(members.get(k)))?;
    }
    out.push(']');
    Ok(())
}

fn named(out: &mut String, ty: &str, v: Option<&Value>) -> Result<(), Uncovered> {
    match schema().get(ty).ok_or(Uncovered)? {
        // Every resource list of a pod is rounded up to milli-units by the defaults.
        Def::Named(_) if ty == "core.ResourceList" => {
            map(out, v, |out, q| special(out, "resource.Quantity", q, true))
        }
        Def::Named(under) => value(out, under, v),
        Def::Special => special(out, ty, v, false),
        Def::Struct(fields) => {
            out.push('{');
            for (i, f) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(&f.name);
                out.push_str(":(");
                out.push_str(&f.ty);
                out.push(')');
                match &f.json {
                    Json::Member(name) => value(out, &f.ty, v.and_then(|v| v.get(name)))?,
                    // An embedded struct reads the same object (absent: all zero).
                    Json::Inline => named(out, &f.ty, v)?,
                    Json::Absent => value(out, &f.ty, None)?,
                }
            }
            out.push('}');
            Ok(())
        }
    }
}

fn special(out: &mut String, ty: &str, v: Option<&Value>, rounded: bool) -> Result<(), Uncovered> {
    match ty {
        "resource.Quantity" => {
            let q = v.and_then(|v| Quantity::of_json(v, rounded));
            q.ok_or(Uncovered)?.print(out);
        }
        "intstr.IntOrString" => {
            let (kind, int, text) = match v {
                None => (0, 0, ""),
                Some(Value::Number(n)) => (0, n.as_i64().ok_or(Uncovered)?, ""),
                Some(Value::String(s)) => (1, 0, s.as_str()),
                Some(_) => return Err(Uncovered),
            };
            out.push_str(&format!(
                "{{Type:(intstr.Type){kind} IntVal:(int32){int} StrVal:(string){text}}}"
            ));
        }
        // Only the zero time is covered (a manifest's creationTimestamp is null).
        "v1.Time" if v.is_none() => out
            .push_str("{Time:(time.Time){wall:(uint64)0 ext:(int64)0 loc:(*time.Location)<nil>}}"),
        _ => return Err(Uncovered),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_reads_whole() {
        let s = schema();
        let Some(Def::Struct(pod)) = s.get("core.Pod") else {
            panic!("no core.Pod");
        };
        let names: Vec<&str> = pod.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["TypeMeta", "ObjectMeta", "Spec", "Status"]);
        // Every type a field names is defined (or basic).
        for def in s.values() {
            let Def::Struct(fields) = def else { continue };
            for f in fields {
                let base =
                    f.ty.trim_start_matches('*')
                        .trim_start_matches("[]")
                        .trim_start_matches('*');
                let base = base.rsplit(']').next().unwrap_or(base);
                assert!(
                    matches!(base, "string" | "bool" | "int32" | "int64" | "uint8")
                        || s.contains_key(base),
                    "{} {}",
                    f.name,
                    f.ty
                );
            }
        }
    }
}
