//! A Kubernetes API server double: the REST paths a node agent uses, answered the way
//! the real API server answers them, over HTTP on loopback.
//!
//! No real API server can be installed on the machines wasmlet is built on, so cluster
//! mode is tested against this. It keeps objects as JSON, any resource under
//! `/api/v1` and `/apis/<group>/<version>`, namespaced or not:
//!
//! - create (`POST`): `409 AlreadyExists` for a taken name; fills in `uid`,
//!   `resourceVersion`, `creationTimestamp` (and `generateName`).
//! - get, list (`fieldSelector` with `=`, `==`, `!=` on dotted paths, e.g.
//!   `spec.nodeName=node-a`; the list carries the store's `resourceVersion`).
//! - watch (`?watch=true`): from a `resourceVersion` (the changes after it, then live
//!   ones) or from now (every current object as ADDED first), filtered by the field
//!   selector, ended by `timeoutSeconds`; a `resourceVersion` older than the kept history
//!   ([`ApiServerSim::compact`]) gets an ERROR event with a 410 `Expired` Status;
//!   [`ApiServerSim::end_watches`] drops every open watch.
//! - replace (`PUT`) and patch (`PATCH`, merge and strategic-merge treated as JSON merge
//!   patch): `409 Conflict` when the body names a `resourceVersion` that is not the
//!   current one; the `status` subresource changes only `status`, the main resource
//!   everything but `status` (for resources that have a status).
//! - TokenRequest (`POST serviceaccounts/NAME/token`) for a service account that exists.
//! - Services get a `clusterIP` from 10.96.0.0/12 unless they ask for one (or `None`);
//!   the `kubernetes` Service of `default` is there from the start (10.96.0.1:443).
//! - a pod's `spec.ephemeralContainers` changes only through its `ephemeralcontainers`
//!   subresource, with the API server's validation (unique names, never removed or
//!   changed: 422 `Invalid`); strategic merge patches merge container lists by name.
//! - a `metadata.uid` in a replace or patch body that is not the object's →
//!   `409 Conflict` (Precondition failed), as the kubelet's status patches rely on.
//! - delete: preconditions (`uid`, `resourceVersion`) → `409 Conflict`; pods are deleted
//!   gracefully (first a `deletionTimestamp` and `deletionGracePeriodSeconds`, then gone
//!   when deleted with grace 0, as the kubelet's final delete does).
//!
//! - the node proxy (`node_proxy`): `pods/log`, `pods/exec`, `pods/attach` and
//!   `pods/portforward` forwarded to the pod's kubelet with a client certificate,
//!   upgrades included; TokenReview and SubjectAccessReview answered from rules a test
//!   sets ([`ApiServerSim::add_token`], [`ApiServerSim::allow`]).
//!
//! - custom resources (`crd`): a CustomResourceDefinition created makes its resource
//!   servable (404 before, as for any group the server lacks), with its `status`
//!   subresource and `metadata.generation`; deleting it deletes its objects.
//! - server-side apply (`apply`): `PATCH` with `application/apply-patch+yaml`, each
//!   manager's fields in `metadata.managedFields`, conflicts unless `force`, keyed lists
//!   (`x-kubernetes-list-type: map`) merged item by item.
//! - ValidatingAdmissionPolicy (`policy`): the policies and bindings stored under
//!   `admissionregistration.k8s.io` refuse the updates they deny, their CEL evaluated
//!   over the object, the old object and who asks.
//!
//! Errors are `Status` objects with the API server's reasons and codes.
//!
//! Here: [`ApiServerSim`] (`sim`), what tests call, and the state it shares with its
//! server. `store` keeps the objects and the rules of each verb; `serve` runs the
//! server (HTTP or HTTPS) and `http` parses paths and answers requests (watches
//! included); `tls` says who asks and `ca` signs for the cluster; `node_proxy` is the
//! way to the kubelets (through `kubelet_client`) and the reviews.

mod apply;
mod ca;
mod certificates;
mod crd;
mod defaults;
mod http;
mod kubeconfig;
mod kubelet_client;
mod log_ws;
mod node_proxy;
mod policy;
mod resize;
mod serve;
mod sim;
mod store;
mod tls;
mod values;

pub use ca::CaError;
pub use kubeconfig::{write_kubeconfig, write_kubeconfig_as};
pub use kubelet_client::DEFAULT_ADDRESS_TYPES;
pub use serve::Served;
pub use sim::{ApiServerSim, Change};
pub use tls::{Identity, write_bootstrap_kubeconfig};

#[cfg(test)]
mod tests;
