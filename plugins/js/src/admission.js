// Writing an admission policy (the `admission-policy` world):
//
//   import { policy, reject } from 'wasmlet-plugin/admission';
//   export const admission = policy((pod, node) => {
//     if (pod.containers.some((c) => c.image.endsWith(':latest')))
//       return reject('LatestTag', 'a container uses :latest');
//     // returning nothing admits the pod
//   });
//
// The pod and the node are read field by field: a field the policy never reads is never
// copied into it, and one it reads is asked of the host once per decision.
import { announce } from './errors.js';

/** The pod may run. */
export const ADMIT = Object.freeze({ tag: 'admit' });

/** A rejection with a machine `reason` (CamelCase) and a human `message`. */
export function reject(reason, message) {
  return { tag: 'reject', val: { reason, message } };
}

/** The kubelet's words when one of its predicates fails. */
export function predicateFailed(name, description) {
  return reject(name, `Predicate ${name} failed: ${description}`);
}

/** Defines a getter on `proto` for each name: `view[method]()` on first read, then kept. */
function lazy(proto, fields) {
  for (const [name, method, wrap] of fields) {
    Object.defineProperty(proto, name, {
      get() {
        const value = wrap ? wrap(this.view[method]()) : this.view[method]();
        Object.defineProperty(this, name, { value });
        return value;
      },
    });
  }
}

const entries = (pairs) => Object.fromEntries(pairs);

/** The pod under admission, for one decision. */
export class Pod {
  constructor(view) {
    this.view = view;
  }

  /** Init containers, then app containers. */
  get allContainers() {
    return [...this.initContainers, ...this.containers];
  }
}
lazy(Pod.prototype, [
  ['uid', 'uid'], ['name', 'name'], ['namespace', 'namespace'],
  ['labels', 'labels', entries], ['annotations', 'annotations', entries],
  ['containers', 'containers'], ['initContainers', 'initContainers'],
  ['overhead', 'overhead'], ['requests', 'requests'],
  ['nodeSelector', 'nodeSelector', entries], ['requiredNodeAffinity', 'requiredNodeAffinity'],
  ['tolerations', 'tolerations'], ['hostNetwork', 'hostNetwork'], ['priority', 'priority'],
  ['staticPod', 'staticPod'], ['source', 'source'],
  // The whole pod as a v1 Pod (decoded JSON), for what the fields leave out.
  ['object', 'json', JSON.parse],
]);

/** The node the pod would join, for one decision. */
export class Node {
  constructor(view) {
    this.view = view;
  }
}
lazy(Node.prototype, [
  ['name', 'name'], ['labels', 'labels', entries], ['taints', 'taints'],
  ['allocatable', 'allocatable'], ['usage', 'usage'], ['hostPortsInUse', 'hostPortsInUse'],
]);

/**
 * The `admission` export of a policy: `decide(pod, node)` returns `ADMIT`, `reject(...)`
 * or nothing (admit).
 */
export function policy(decide) {
  return {
    admit(pod, node) {
      try {
        return decide(new Pod(pod), new Node(node)) ?? ADMIT;
      } catch (e) {
        throw announce(e);
      }
    },
  };
}
