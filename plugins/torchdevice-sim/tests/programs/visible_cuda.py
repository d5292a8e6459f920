"""A CUDA program reporting the devices it sees, as JSON (test_sim_translation: CUDA_VISIBLE_DEVICES on sim)."""
import json

import torch

count = torch.cuda.device_count()
seen = {"available": torch.cuda.is_available(), "count": count,
        "uuids": [str(torch.cuda.get_device_properties(i).uuid) for i in range(count)],
        "total": [torch.cuda.get_device_properties(i).total_memory for i in range(count)],
        "devices": [str(torch.ones(1, device=f"cuda:{i}").device) for i in range(count)]}
print(json.dumps(seen))
