"""Drafts learned from the target (`python -m specjax.train_draft`): the target's own
decodes as data (`data`), Medusa heads trained on its hidden states (`medusa`), and the
heads' checkpoints (`heads_io`)."""
