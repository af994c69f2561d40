"""A Triton python-backend model that stalls for STALL_S every STALL_EVERY-th request.

Used to check that open-loop latency includes the queueing behind a stall
(and that a naive, send-time measurement would hide it).
"""

import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.every = int(parameters["stall_every"]["string_value"])
        self.stall_s = float(parameters["stall_s"]["string_value"])
        self.count = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            self.count += 1
            if self.count % self.every == 0:
                time.sleep(self.stall_s)
            values = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", values)]))
        return responses
