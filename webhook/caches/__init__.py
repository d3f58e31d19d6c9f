"""What the policy engine reads from informers: params, Namespaces and the caches ``spec.references`` declares."""
