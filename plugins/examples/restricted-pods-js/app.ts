// `restricted-pods` in TypeScript, deciding as the Rust version does: outside the
// namespaces in the `allowed-namespaces` setting (comma-separated; default `kube-system`),
// a pod may not run privileged containers nor share the node's PID or IPC namespace.
// Reason `RestrictedPod`.
import { config } from 'wasmlet-plugin/host';
import { policy, reject } from 'wasmlet-plugin/admission';

export const admission = policy((pod) => {
  const allowed = config('allowed-namespaces', 'kube-system');
  const namespace = pod.namespace;
  if (allowed.split(',').some((ns) => ns.trim() === namespace)) return;
  const privileged = pod.allContainers.find((c) => c.privileged);
  if (privileged) {
    return reject(
      'RestrictedPod',
      `container ${privileged.name} is privileged, which namespace ${namespace} does not allow`,
    );
  }
  const spec = pod.object.spec ?? {};
  for (const field of ['hostPID', 'hostIPC']) {
    if (spec[field] === true) {
      return reject('RestrictedPod', `spec.${field} is set, which namespace ${namespace} does not allow`);
    }
  }
});
