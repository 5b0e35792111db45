"""Traffic-weighted consistent-hash ring with delayed reassignment (pure logic, no I/O)."""
