"""A pod source whose pods come from its configuration: `replicas` (default 1) pods
running `image`, named `<name>-<i>` (`name` defaults to `replica`) in `namespace`
(default `default`)."""

from wasmlet_plugin import host
from wasmlet_plugin.source import PodSource, manifest


class Source(PodSource):
    def pods(self):
        image = host.config("image")
        if image is None:
            raise ValueError("no `image` in the source's configuration")
        replicas = host.config("replicas", "1")
        if not replicas.isdigit():
            raise ValueError(f"replicas {replicas!r}: not a number")
        name = host.config("name", "replica")
        namespace = host.config("namespace", "default")
        return [
            manifest(
                f"replica {i}",
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"{name}-{i}", "namespace": namespace, "labels": {"app": name}},
                    "spec": {"containers": [{"name": "main", "image": image}]},
                },
            )
            for i in range(int(replicas))
        ]
