"""What the tests share: stacks, clients, fakes, clocks and waiters, the real parts' set-up, and the
fake upstreams. No test module imports another test module: what two need lives here."""
