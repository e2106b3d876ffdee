"""What a measurement leaves: a record's fields and status, the append-only store, datasets
written from stores, the records library and where a measurement came from;
:mod:`bocast.records.public` gathers the names scripts and users' code import."""
