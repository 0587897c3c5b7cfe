"""Contract tests: this plugin passes swiftcore's plugin contract (swiftcore_testing.PluginContract)."""

from swiftcore_testing import PluginContract


class TestBridgeGptContract(PluginContract):
    plugin = "bridge_gpt"
    # MLA + group-top-k MoE needs its own tiny sizes (as in conftest.TINY["deepseek_v3"]).
    bridge_config_overrides = {"deepseek_v3": {
        "num_key_value_heads": 4, "head_dim": 16, "moe_intermediate_size": 32, "n_routed_experts": 4,
        "n_shared_experts": 1, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "first_k_dense_replace": 1,
        "kv_lora_rank": 32, "q_lora_rank": 48, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32,
    }}
