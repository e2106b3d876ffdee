"""The RPC runner (:mod:`bocast.measure.rpc.runner`) and its fleet: GPU servers, the
tracker, the wire protocol, who may connect, batches and the servers' own builds."""
