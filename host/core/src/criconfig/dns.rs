//! The pod's resolver configuration, from its `dnsPolicy` and `dnsConfig`, the node's
//! resolver and the node's `clusterDNS` / `clusterDomain`, as the kubelet forms it.

use k8s_openapi::api::core::v1 as k8s;
use wasmlet_cri_api::proto;

use super::NodeContext;
use crate::pod;

/// At most this many name servers reach a resolver (glibc's limit, the kubelet's cut).
const MAX_NAMESERVERS: usize = 3;
/// At most this many search domains (the kubelet's limit).
const MAX_SEARCHES: usize = 32;
/// The options a pod resolving through the cluster's DNS gets.
const CLUSTER_OPTIONS: [&str; 1] = ["ndots:5"];

/// Parses `/etc/resolv.conf` text.
pub fn parse_resolv_conf(text: &str) -> proto::DnsConfig {
    let mut dns = proto::DnsConfig::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => dns.servers.extend(words.next().map(str::to_owned)),
            Some("search" | "domain") => {
                dns.searches = words.map(str::to_owned).collect();
            }
            Some("options") => dns.options.extend(words.map(str::to_owned)),
            _ => {}
        }
    }
    dns
}

/// Where a pod's resolver configuration starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DnsKind {
    /// Nothing: only the pod's `dnsConfig` (`dnsPolicy: None`).
    None,
    /// The cluster's DNS servers and search path.
    Cluster,
    /// The node's resolver.
    Node,
}

/// The kubelet's reading of `dnsPolicy`: ClusterFirst is the cluster's DNS except on the
/// node's network (ClusterFirstWithHostNet asks for it there too), and without a
/// `clusterDNS` the cluster's DNS is the node's resolver.
fn dns_kind<C>(pod: &k8s::Pod, ctx: &NodeContext<C>) -> DnsKind {
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let kind = match policy {
        "None" => DnsKind::None,
        "ClusterFirstWithHostNet" => DnsKind::Cluster,
        "Default" => DnsKind::Node,
        _ if pod::host_network(pod) => DnsKind::Node,
        _ => DnsKind::Cluster,
    };
    if kind == DnsKind::Cluster && ctx.cluster_dns.is_empty() {
        DnsKind::Node
    } else {
        kind
    }
}

fn push_unique(list: &mut Vec<String>, items: impl IntoIterator<Item = String>) {
    for item in items {
        if !list.contains(&item) {
            list.push(item);
        }
    }
}

/// The pod's resolver configuration.
pub fn dns_config<C>(pod: &k8s::Pod, ctx: &NodeContext<C>) -> proto::DnsConfig {
    let mut dns = match dns_kind(pod, ctx) {
        DnsKind::None => proto::DnsConfig::default(),
        DnsKind::Node => ctx.dns.clone(),
        DnsKind::Cluster => {
            let mut searches = Vec::new();
            if !ctx.cluster_domain.is_empty() {
                let d = &ctx.cluster_domain;
                let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
                searches = vec![format!("{ns}.svc.{d}"), format!("svc.{d}"), d.clone()];
            }
            push_unique(&mut searches, ctx.dns.searches.iter().cloned());
            proto::DnsConfig {
                servers: ctx.cluster_dns.clone(),
                searches,
                options: CLUSTER_OPTIONS.map(str::to_owned).to_vec(),
            }
        }
    };
    if let Some(c) = pod.spec.as_ref().and_then(|s| s.dns_config.as_ref()) {
        push_unique(&mut dns.servers, c.nameservers.iter().flatten().cloned());
        push_unique(&mut dns.searches, c.searches.iter().flatten().cloned());
        for o in c.options.iter().flatten() {
            let Some(name) = o.name.as_deref() else {
                continue;
            };
            dns.options.retain(|x| x.split(':').next() != Some(name));
            dns.options.push(match o.value.as_deref() {
                Some(v) => format!("{name}:{v}"),
                None => name.to_owned(),
            });
        }
    }
    dns.servers.truncate(MAX_NAMESERVERS);
    dns.searches.truncate(MAX_SEARCHES);
    dns
}
