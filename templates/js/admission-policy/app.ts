// A wasmlet admission policy: pods outside an exempt namespace must give every container
// a memory limit. Configure the namespace with `exempt-namespace`.
import { config } from 'wasmlet-plugin/host';
import { policy, reject } from 'wasmlet-plugin/admission';

export const admission = policy((pod) => {
  if (pod.namespace === config('exempt-namespace', 'kube-system')) return;
  const c = pod.containers.find((c) => c.limits.memory === 0n);
  if (c) return reject('MissingMemoryLimit', `container ${c.name} has no memory limit`);
});
