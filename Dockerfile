# primacy on a GPU: docker build -t primacy . && docker run --gpus all -v "$PWD/runs:/app/runs" primacy fit --config configs/paper/verification-s4d-legs-L128.yaml
FROM pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    WANDB_MODE=offline

WORKDIR /app
COPY pyproject.toml README.md ./
COPY primacy ./primacy
COPY configs ./configs
RUN pip install --no-cache-dir .

ENTRYPOINT ["primacy"]
CMD ["--help"]
