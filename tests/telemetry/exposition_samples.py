"""Exposition text in each server's real format (names, labels, `_total`/`_created`, bucket spelling)."""

VLLM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0
vllm:num_requests_waiting{engine="1",model_name="m"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 4.0
vllm:num_preemptions_created{engine="0",model_name="m"} 1.764e+09
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1200.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 800.0
# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request.
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} 2.5
vllm:request_queue_time_seconds_bucket{engine="0",le="0.3",model_name="m"} 4.0
vllm:request_queue_time_seconds_bucket{engine="0",le="0.5",model_name="m"} 6.0
vllm:request_queue_time_seconds_bucket{engine="0",le="1.0",model_name="m"} 9.0
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 10.0
vllm:request_queue_time_seconds_count{engine="0",model_name="m"} 10.0
vllm:request_queue_time_seconds_bucket{engine="1",le="0.3",model_name="m"} 1.0
vllm:request_queue_time_seconds_bucket{engine="1",le="0.5",model_name="m"} 1.0
vllm:request_queue_time_seconds_bucket{engine="1",le="1",model_name="m"} 2.0
vllm:request_queue_time_seconds_bucket{engine="1",le="+Inf",model_name="m"} 2.0
vllm:request_queue_time_seconds_count{engine="1",model_name="m"} 2.0
vllm:request_queue_time_seconds_sum{engine="1",model_name="m"} 0.9
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",gpu_memory_utilization="0.9",num_cpu_blocks="0",num_gpu_blocks="4096"} 1.0
"""

VLLM_DEPRECATED = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 1.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.75
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.01",model_name="m"} 2.0
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} 3.0
vllm:time_per_output_token_seconds_count{model_name="m"} 3.0
vllm:time_per_output_token_seconds_sum{model_name="m"} 0.1
"""

LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 350
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 512
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 130
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 4
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 6
"""

SGLANG = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 5.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.28
# HELP sglang:num_retracted_requests_total Total number of retracted requests.
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
# HELP sglang:queue_time_seconds Histogram of queueing time in seconds.
# TYPE sglang:queue_time_seconds histogram
sglang:queue_time_seconds_bucket{le="0.0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
sglang:queue_time_seconds_bucket{le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
sglang:queue_time_seconds_bucket{le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
sglang:queue_time_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
sglang:queue_time_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.5
"""

TGI = """\
# TYPE tgi_queue_size gauge
tgi_queue_size 3
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 8
# TYPE tgi_request_queue_duration histogram
tgi_request_queue_duration_bucket{le="0.005"} 5
tgi_request_queue_duration_bucket{le="0.05"} 9
tgi_request_queue_duration_bucket{le="+Inf"} 10
tgi_request_queue_duration_sum 0.4
tgi_request_queue_duration_count 10
# TYPE tgi_request_input_length histogram
tgi_request_input_length_bucket{le="+Inf"} 10
tgi_request_input_length_sum 1500
tgi_request_input_length_count 10
"""

DCGM = """\
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-abc",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="h"} 1000
DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-def",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="h"} 3000
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-abc",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="h"} 80000
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-def",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="h"} 78000
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-abc",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="h"} 95
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-def",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="h"} 40
"""

#: dcgm-exporter's power gauge (W) and total energy counter (mJ since the driver loaded; declared a
#: counter in its default list); GPU 1 without the counter (a board that does not report it)
DCGM_ENERGY = DCGM + """\
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-abc",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="h"} 512.25
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-def",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="h"} 90.5
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-abc",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="h"} 123456789012
"""
