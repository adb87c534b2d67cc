"""The request path: profile, routing, dispatch, the upstream wire, relay and taps."""
