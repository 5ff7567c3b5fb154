// A pod source whose pods come from its configuration: `replicas` (default 1) pods running
// `image`, named `<name>-<i>` (`name` defaults to `replica`) in `namespace` (default
// `default`).
import { config } from 'wasmlet-plugin/host';
import { manifest, podSource } from 'wasmlet-plugin/source';

export const source = podSource(() => {
  const image = config('image');
  if (image === undefined) throw new Error("no `image` in the source's configuration");
  const replicas = config('replicas', '1');
  if (!/^\d+$/.test(replicas)) throw new Error(`replicas '${replicas}': not a number`);
  const name = config('name', 'replica');
  const namespace = config('namespace', 'default');
  return Array.from({ length: Number(replicas) }, (_, i) =>
    manifest(`replica ${i}`, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: `${name}-${i}`, namespace, labels: { app: name } },
      spec: { containers: [{ name: 'main', image }] },
    }),
  );
});
