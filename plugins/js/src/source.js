// Writing a pod source (the `pod-source` world):
//
//   import { podSource, manifest } from 'wasmlet-plugin/source';
//   export const source = podSource(() => [manifest('web', { apiVersion: 'v1', kind: 'Pod', ... })]);
//
// `pods()` returns the source's whole desired set: `manifest(origin, pod)` for each pod and
// `problem(origin, message)` for each manifest it had to skip. An exception means the
// source could not be read this time: the host keeps the previous set.
import { describe } from './errors.js';

/** A pod the source wants: a v1 Pod object (or its JSON), with where it came from. */
export function manifest(origin, pod) {
  return { kind: 'pod', origin, podJson: typeof pod === 'string' ? pod : JSON.stringify(pod) };
}

/** A manifest the source could not read; the others are unaffected. */
export function problem(origin, message) {
  return { kind: 'problem', origin, message };
}

/** The `source` export of a pod source. */
export function podSource(pods) {
  return {
    poll() {
      let items;
      try {
        items = [...pods()];
      } catch (e) {
        // The result's error: jco takes a thrown { payload } as `err(payload)`.
        throw { payload: describe(e) };
      }
      return {
        pods: items.filter((i) => i.kind === 'pod').map(({ origin, podJson }) => ({ origin, podJson })),
        problems: items.filter((i) => i.kind === 'problem').map(({ origin, message }) => ({ origin, message })),
      };
    },
  };
}
