"""Proposers (`specjax.core.proposal.Proposer`) that are not separate models (a draft model
is one through `specjax.core.model_proposer`):

- `copy`: copies from the input or the output so far (prompt lookup; trees of several
  earlier matches);
- `bigram`: a table of next tokens (chains; static and dynamic top-k trees);
- `hybrid`: the copy where it matches, a draft model elsewhere (chains);
- `layer_skip`: the target's own first M decoder layers (chains and trees; it reads the
  target's params and encoding; optionally an early exit of its own, trained by
  `python -m specjax.train_draft --kind layerskip`);
- `medusa`: K heads on the target's last hidden state (chains and Medusa trees; trained
  by `python -m specjax.train_draft`);
- `eagle`: one decoder layer that drafts the target's next hidden state from its last
  (T5 and decoder-only targets; chains, static and dynamic trees; trained the same way).
"""
