//! `$(VAR)` references in commands, arguments and env values, expanded as Kubernetes
//! expands them.

use std::collections::BTreeMap;

/// `$(NAME)` replaced by the value of `NAME` in `env`, `$$` by `$`, as Kubernetes expands
/// commands, arguments and env values; a reference to an unknown variable stays as
/// written.
pub fn expand_command(arg: &str, env: &BTreeMap<&str, &str>) -> String {
    expand_with(arg, |name| env.get(name).map(|v| (*v).to_owned()))
}

/// `$(NAME)` references in `arg` replaced by what `lookup` gives for NAME (`None`: the
/// reference stays as written); `$$` is a literal `$`.
pub fn expand_with(arg: &str, mut lookup: impl FnMut(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match lookup(name) {
                Some(value) => out.push_str(&value),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}
