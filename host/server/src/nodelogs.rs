//! `GET /logs/…`: the node's log directory (`/var/log`), as the kubelet serves it with
//! Go's file server — a directory is an HTML list of links (`<pre><a href="x">x</a>`…),
//! a file is sent as it is, in chunks. The path is cleaned the way Go cleans it, so
//! `..` never leaves the directory; a directory asked without its trailing slash is
//! redirected to it. `kubectl get --raw /api/v1/nodes/NODE/proxy/logs/` reads it.

use std::path::{Component, Path, PathBuf};

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::io::AsyncReadExt;

use crate::shared::error;

/// Where the request's path (after `/logs/`) points under `root`: `..` and `.` resolved
/// without ever climbing above `root`.
pub fn resolve(root: &Path, rest: &str) -> PathBuf {
    let mut parts: Vec<&str> = Vec::new();
    for c in Path::new(rest).components() {
        match c {
            Component::Normal(p) => parts.push(p.to_str().unwrap_or_default()),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    parts.iter().fold(root.to_owned(), |p, c| p.join(c))
}

/// `&`, `<`, `>`, `"` and `'` escaped, as Go's file server escapes names.
fn html(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A name as a relative URL path segment (`?`, `#`, `%`, spaces … percent-encoded).
fn href(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The listing of directory `dir`, names sorted, directories with a trailing slash.
async fn listing(dir: &Path) -> std::io::Result<String> {
    let mut entries = tokio::fs::read_dir(dir).await?;
    let mut names = Vec::new();
    while let Some(e) = entries.next_entry().await? {
        let mut name = e.file_name().to_string_lossy().into_owned();
        if e.file_type().await.is_ok_and(|t| t.is_dir()) {
            name.push('/');
        }
        names.push(name);
    }
    names.sort();
    let mut page = String::from(
        "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n",
    );
    for n in names {
        page.push_str(&format!("<a href=\"{}\">{}</a>\n", href(&n), html(&n)));
    }
    page.push_str("</pre>\n");
    Ok(page)
}

/// Answers `GET /logs/<rest>` from `root`; `request_path` is the whole path (for the
/// redirect of a directory asked without its slash).
pub async fn serve(root: &Path, rest: &str, request_path: &str) -> Response {
    let path = resolve(root, rest);
    let meta = match tokio::fs::metadata(&path).await {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return error(StatusCode::NOT_FOUND, "404 page not found\n");
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return error(StatusCode::FORBIDDEN, "403 Forbidden\n");
        }
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    if meta.is_dir() {
        if !request_path.ends_with('/') {
            let to = format!("{}/", request_path.rsplit('/').next().unwrap_or_default());
            return (StatusCode::MOVED_PERMANENTLY, [(header::LOCATION, to)]).into_response();
        }
        return match listing(&path).await {
            Ok(page) => {
                ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response()
            }
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        };
    }
    let file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return error(StatusCode::FORBIDDEN, "403 Forbidden\n");
        }
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let kind = if path.extension().is_some_and(|e| e == "gz") {
        "application/gzip"
    } else {
        "text/plain; charset=utf-8"
    };
    let chunks = futures::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        let mut buf = vec![0u8; 64 * 1024];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<_, std::io::Error>(Bytes::from(buf)), Some(file)))
            }
            Err(e) => Some((Err(e), None)),
        }
    });
    (
        [
            (header::CONTENT_TYPE, kind.to_owned()),
            (header::CONTENT_LENGTH, meta.len().to_string()),
        ],
        Body::from_stream(chunks),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_never_leave_the_directory() {
        let root = Path::new("/var/log");
        assert_eq!(resolve(root, ""), PathBuf::from("/var/log"));
        assert_eq!(resolve(root, "syslog"), PathBuf::from("/var/log/syslog"));
        assert_eq!(resolve(root, "a/./b/"), PathBuf::from("/var/log/a/b"));
        assert_eq!(
            resolve(root, "../../etc/passwd"),
            PathBuf::from("/var/log/etc/passwd")
        );
        assert_eq!(resolve(root, "a/../../b"), PathBuf::from("/var/log/b"));
        assert_eq!(
            resolve(root, "/etc/shadow"),
            PathBuf::from("/var/log/etc/shadow")
        );
    }

    #[test]
    fn names_are_escaped_for_html_and_urls() {
        assert_eq!(html("<a&b>\"'"), "&lt;a&amp;b&gt;&#34;&#39;");
        assert_eq!(href("a b?#%/"), "a%20b%3F%23%25/");
    }
}
