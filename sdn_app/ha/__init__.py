"""High availability: several controllers sharing their state in etcd, one leader elected on it."""
