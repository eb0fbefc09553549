"""Every LightningModule of primacy's tasks.

Modules:
    base           TaskModel: the embedding, the stage metrics, logging and the optimiser
    free_recall    FreeRecallModel: outputs fed back until stop, set losses or a reward
    language       LanguageModel: next-token prediction (induction)
    lists          SequenceModel, RecallModel: an answer at each query position
    optim          Optimiser, the settings every model ends with (AdamW, warm-up + cosine); parameter groups
    recall_reward  free recall's reward: rewards, returns, baseline, REINFORCE loss
"""
