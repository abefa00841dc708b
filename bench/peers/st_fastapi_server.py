# The server most people write: sentence-transformers behind FastAPI/uvicorn, one POST /embed route
# taking TEI's {"inputs": str | [str]} and answering [[float]] (normalised). A peer of `roformer serve`
# for bench/peers/serve_peers.py.
#   python st_fastapi_server.py MODEL_DIR PORT
import sys
from typing import List, Union

import torch
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel
from sentence_transformers import SentenceTransformer

model_dir, port = sys.argv[1], int(sys.argv[2])
model = SentenceTransformer(model_dir, device="cpu")  # no sentence-transformers config: mean pooling
app = FastAPI()


class EmbedRequest(BaseModel):
    inputs: Union[str, List[str]]


@app.post("/embed")
def embed(request: EmbedRequest):
    texts = [request.inputs] if isinstance(request.inputs, str) else request.inputs
    with torch.inference_mode():
        return model.encode(texts, normalize_embeddings=True, convert_to_numpy=True).tolist()


@app.get("/health")
def health():
    return {}


uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
