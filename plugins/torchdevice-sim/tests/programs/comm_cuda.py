"""Written for CUDA: torch.cuda.comm's broadcast, reduce_add, scatter and gather over two GPUs (printed as JSON)."""
import json

import torch
import torch.cuda.comm as comm


def show(tensors):
    return [[str(t.device), t.tolist()] for t in tensors]


x = torch.arange(6.0).reshape(3, 2).cuda(0)
one, two = torch.arange(4.0, device="cuda:0"), torch.arange(4.0, device="cuda:1") * 10
json.dump({
    "broadcast": show(comm.broadcast(x, [0, 1])),
    "reduce_add": show([comm.reduce_add([one, two], destination=1)]),
    "scatter": show(comm.scatter(torch.arange(10.0).cuda(0), [0, 1], chunk_sizes=[3, 7])),
    "gather": show([comm.gather([one, two], destination=1)]),
    "gather_host": show([comm.gather([one, two], destination=-1)]),
}, __import__("sys").stdout)
