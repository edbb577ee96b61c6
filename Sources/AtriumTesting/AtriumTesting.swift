// Test helpers are added with the host.
