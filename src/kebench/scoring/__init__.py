"""Scoring of edited models (design §5): probe scores and metrics, generation,
stealthiness, mitigation, the tamper audit, lifelong streams. The teacher-forced
log-probs they read are ``kebench.models.logprobs``, shared with editing below."""
