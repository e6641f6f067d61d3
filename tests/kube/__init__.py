"""Contract tier: kaisched against a real kube-apiserver 1.35 + etcd 3.4 (marker ``kube``; ``make test``)."""
