"""What is searched: knobs and their known constraints (:mod:`bocast.space.knobs`),
a schedule space and its operations (:mod:`bocast.space.space`), the encodings and
features the models read, the candidates strategies draw from, sub-spaces, and the
operators with their spaces (:mod:`bocast.space.operators`)."""
