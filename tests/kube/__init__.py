"""Contract tier: kaisched against a real kube-apiserver 1.20.2 + etcd 3.4 (marker ``kube``; ``make test``)."""
