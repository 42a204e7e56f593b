"""Drafts learned from the target (`python -m specjax.train_draft`): the target's own
decodes as data (`data`), the training loop they share (`fit`), Medusa heads (`medusa`)
and an EAGLE head (`eagle`) trained on its hidden states, and the heads' checkpoints
(`heads_io`)."""
