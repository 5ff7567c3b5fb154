//! Where a plugin may connect: the probed pod's own address, or address ranges — the
//! grants of probe handlers' TCP and of every plugin's outgoing HTTP.

use std::net::IpAddr;

/// An address range a plugin may connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkGrant {
    /// The probed pod's own address (the target's `pod-ip`).
    Pod,
    /// An address range: `10.88.0.0/16`, `127.0.0.1` (a /32).
    Cidr(IpAddr, u8),
}

impl std::str::FromStr for NetworkGrant {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "pod" {
            return Ok(Self::Pod);
        }
        let invalid = || format!("{s:?} is neither `pod` nor an address or CIDR");
        let (addr, bits) = match s.split_once('/') {
            Some((a, b)) => (a, Some(b.parse::<u8>().map_err(|_| invalid())?)),
            None => (s, None),
        };
        let ip: IpAddr = addr.parse().map_err(|_| invalid())?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let bits = bits.unwrap_or(max);
        if bits > max {
            return Err(invalid());
        }
        Ok(Self::Cidr(ip, bits))
    }
}

impl NetworkGrant {
    /// Whether `ip` is in the grant, `pod_ip` being the probed pod's address.
    pub(crate) fn contains(&self, ip: IpAddr, pod_ip: Option<IpAddr>) -> bool {
        match self {
            Self::Pod => pod_ip == Some(ip),
            Self::Cidr(net, bits) => match (net, ip) {
                (IpAddr::V4(n), IpAddr::V4(a)) => {
                    let mask = u32::MAX.checked_shl(32 - u32::from(*bits)).unwrap_or(0);
                    u32::from(*n) & mask == u32::from(a) & mask
                }
                (IpAddr::V6(n), IpAddr::V6(a)) => {
                    let mask = u128::MAX.checked_shl(128 - u32::from(*bits)).unwrap_or(0);
                    u128::from(*n) & mask == u128::from(a) & mask
                }
                _ => false,
            },
        }
    }

    /// Whether everything `other` allows, this allows too: `pod` covers `pod`; a range
    /// covers the ranges inside it. For granting what a cluster plugin asks for.
    pub fn covers(&self, other: &NetworkGrant) -> bool {
        match (self, other) {
            (Self::Pod, Self::Pod) => true,
            (Self::Cidr(_, bits), Self::Cidr(ip, other_bits)) => {
                other_bits >= bits && self.contains(*ip, None)
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_parse_and_match() {
        let pod: IpAddr = "10.88.0.7".parse().expect("ip");
        let g: Vec<NetworkGrant> = ["pod", "127.0.0.1", "10.0.0.0/8", "fd00::/8"]
            .iter()
            .map(|s| s.parse().expect("grant"))
            .collect();
        assert!(g[0].contains(pod, Some(pod)));
        assert!(!g[0].contains("10.88.0.8".parse().expect("ip"), Some(pod)));
        assert!(g[1].contains("127.0.0.1".parse().expect("ip"), None));
        assert!(!g[1].contains("127.0.0.2".parse().expect("ip"), None));
        assert!(g[2].contains(pod, None));
        assert!(g[3].contains("fd12::1".parse().expect("ip"), None));
        assert!(!g[3].contains(pod, None));
        let covers = |a: &str, b: &str| {
            let (a, b): (NetworkGrant, NetworkGrant) =
                (a.parse().expect("a"), b.parse().expect("b"));
            a.covers(&b)
        };
        assert!(covers("pod", "pod"));
        assert!(covers("10.0.0.0/8", "10.88.0.0/16"));
        assert!(covers("10.0.0.0/8", "10.1.2.3"));
        assert!(
            !covers("10.88.0.0/16", "10.0.0.0/8"),
            "a wider range is more"
        );
        assert!(!covers("10.0.0.0/8", "pod") && !covers("pod", "10.1.2.3"));
        for bad in ["", "10.0.0.0/33", "example.com", "1.2.3.4/x"] {
            assert!(bad.parse::<NetworkGrant>().is_err(), "{bad}");
        }
    }
}
