"""Every LightningModule of primacy's tasks.

Modules:
    base             TaskModel: the embedding, the stage metrics, logging and the optimiser
    free_recall      FreeRecallModel: outputs fed back until stop, set losses or a reward
    language         LanguageModel: next-token prediction (induction)
    lists            SequenceModel, RecallModel: an answer at each query position
    optim            Optimiser, the settings every model ends with (AdamW, warm-up + cosine); parameter groups
    recall_draws     free recall's random numbers, each list's from its own generator
    recall_reward    free recall's reward: rewards, returns, baseline, REINFORCE loss
    recall_settings  free recall's settings: names allowed, reward defaults, the combination check
"""
