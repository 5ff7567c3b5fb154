//! A JavaScript plugin's places, read back from its bundle to the author's files.
//! componentize-js runs one bundled module, `plugin.js`, so an exception's stack names
//! places in the bundle (`lookup@plugin.js:77:3`). The SDK's build (plugins/js/build.mjs)
//! appends the bundle's source map to the component as the custom section
//! [`SECTION`]; the host keeps its bytes and, only when a call failed, maps each
//! `plugin.js:LINE:COLUMN` in the guest's words to `app.ts:LINE:COLUMN`.

use std::sync::Arc;

/// The custom section holding the bundle's source map.
pub const SECTION: &str = "wasmlet-sourcemap";

/// The name the bundle has in a stack.
const BUNDLE: &str = "plugin.js:";

/// The source map of a component's bundle, as the section holds it (parsed when used).
#[derive(Clone)]
pub struct BundleMap {
    json: Arc<[u8]>,
}

impl BundleMap {
    /// The map `wasm` carries in a top-level custom section `SECTION`, if it does.
    pub fn find(wasm: &[u8]) -> Option<Self> {
        custom_section(wasm, SECTION).map(|json| Self { json: json.into() })
    }

    /// `text` with each `plugin.js:LINE:COLUMN` the map knows replaced by the original
    /// file, line and column; the rest as it was (a map that does not parse changes
    /// nothing).
    pub fn rewrite(&self, text: &str) -> String {
        if !text.contains(BUNDLE) {
            return text.to_owned();
        }
        let Ok(map) = sourcemap::SourceMap::from_slice(&self.json) else {
            return text.to_owned();
        };
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find(BUNDLE) {
            out.push_str(&rest[..at]);
            let after = &rest[at + BUNDLE.len()..];
            match place(after).and_then(|(line, col, used)| {
                let line = line.checked_sub(1)?;
                // The nearest mapping before the place, if it is on the same line.
                let token = map
                    .lookup_token(line, col.saturating_sub(1))
                    .filter(|t| t.get_dst_line() == line)?;
                let original = format!(
                    "{}:{}:{}",
                    token.get_source()?,
                    token.get_src_line() + 1,
                    token.get_src_col() + 1
                );
                Some((original, used))
            }) {
                Some((original, used)) => {
                    out.push_str(&original);
                    rest = &after[used..];
                }
                None => {
                    out.push_str(BUNDLE);
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }
}

/// `LINE:COLUMN` at the start of `text`: both numbers and the bytes they took.
fn place(text: &str) -> Option<(u32, u32, usize)> {
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let l = digits(text);
    let line = text[..l].parse().ok()?;
    let rest = text[l..].strip_prefix(':')?;
    let c = digits(rest);
    let col = rest[..c].parse().ok()?;
    Some((line, col, l + 1 + c))
}

/// The contents of the top-level custom section `name` of a component (or module):
/// sections are walked by their sizes, nested modules skipped whole.
fn custom_section<'a>(wasm: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let mut rest = wasm.get(8..)?;
    while let Some((&id, tail)) = rest.split_first() {
        let (size, tail) = leb128(tail)?;
        let body = tail.get(..size)?;
        rest = &tail[size..];
        if id == 0 {
            let (len, body) = leb128(body)?;
            if body.get(..len)? == name.as_bytes() {
                return Some(&body[len..]);
            }
        }
    }
    None
}

/// An unsigned LEB128 number (at most 32 bits) and what follows it.
fn leb128(bytes: &[u8]) -> Option<(usize, &[u8])> {
    let mut value = 0usize;
    for (i, &b) in bytes.iter().enumerate().take(5) {
        value |= usize::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, &bytes[i + 1..]));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component header, one core-module section and the map's custom section.
    fn component_with(map: &str) -> Vec<u8> {
        let mut wasm = vec![0, b'a', b's', b'm', 0x0d, 0, 1, 0];
        wasm.extend([1, 3, 0xaa, 0xbb, 0xcc]);
        let mut body = vec![SECTION.len() as u8];
        body.extend(SECTION.as_bytes());
        body.extend(map.as_bytes());
        wasm.push(0);
        wasm.push(body.len() as u8);
        wasm.extend(body);
        wasm
    }

    // plugin.js line 3 (0-based 2), column 3 (0-based 2) comes from app.ts line 4
    // (0-based 3), column 10 (0-based 9): segment "EAGS" on the third line.
    const MAP: &str = r#"{"version":3,"sources":["app.ts"],"names":[],"mappings":";;EAGS"}"#;

    #[test]
    fn a_bundle_place_reads_as_the_authors_file_and_line() {
        let map = BundleMap::find(&component_with(MAP)).expect("the section is found");
        assert_eq!(
            map.rewrite("can't access property\n  lookup@plugin.js:3:3\n  admit@plugin.js:99:1"),
            "can't access property\n  lookup@app.ts:4:10\n  admit@plugin.js:99:1"
        );
    }

    #[test]
    fn text_without_places_or_a_component_without_a_map_is_left_alone() {
        assert!(BundleMap::find(&component_with(MAP)[..13]).is_none());
        let map = BundleMap::find(&component_with(MAP)).expect("a source map");
        assert_eq!(map.rewrite("plugin.js: no place"), "plugin.js: no place");
    }
}
