//! Kubeconfigs naming the double, for clients under test.

/// Writes a kubeconfig at `path` naming the double at `url` (its current context, a
/// bearer token the double accepts like any other), for clients under test.
pub fn write_kubeconfig(path: &std::path::Path, url: &str) -> std::io::Result<()> {
    write_kubeconfig_as(path, url, "node-token")
}

/// As [`write_kubeconfig`], the requests carrying `token` (an identity when the double
/// knows it: [`ApiServerSim::add_token`](crate::ApiServerSim::add_token)).
pub fn write_kubeconfig_as(path: &std::path::Path, url: &str, token: &str) -> std::io::Result<()> {
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: {url}\n\
             users:\n- name: node\n  user:\n    token: {token}\ncontexts:\n- name: sim\n  \
             context:\n    cluster: sim\n    user: node\ncurrent-context: sim\n"
        ),
    )
}
