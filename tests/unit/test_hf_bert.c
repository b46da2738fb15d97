/* test_hf_bert.c - a Hugging Face BERT folder's shape (backends/hf_bert.h):
 * all-MiniLM-L6-v2's own files read as they are, and every thing batchgate
 * does not implement refused with the file, the field and the value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "backends/hf_bert.h"
#include "tests/unit/scratch.h"

static char dir[256];

/* all-MiniLM-L6-v2's files, as its PyPI package carries them. */
static const char minilm_config[] =
    "{\"architectures\": [\"BertModel\"], \"attention_probs_dropout_prob\": 0.1,"
    " \"hidden_act\": \"gelu\", \"hidden_size\": 384, \"intermediate_size\": 1536,"
    " \"layer_norm_eps\": 1e-12, \"max_position_embeddings\": 512, \"model_type\": \"bert\","
    " \"num_attention_heads\": 12, \"num_hidden_layers\": 6, \"pad_token_id\": 0,"
    " \"position_embedding_type\": \"absolute\", \"type_vocab_size\": 2, \"vocab_size\": 30522}";
static const char minilm_modules[] =
    "[{\"idx\": 0, \"name\": \"0\", \"path\": \"\", \"type\": "
    "\"sentence_transformers.models.Transformer\"},"
    " {\"idx\": 1, \"name\": \"1\", \"path\": \"1_Pooling\", \"type\": "
    "\"sentence_transformers.models.Pooling\"},"
    " {\"idx\": 2, \"name\": \"2\", \"path\": \"2_Normalize\", \"type\": "
    "\"sentence_transformers.models.Normalize\"}]";
static const char minilm_pooling[] =
    "{\"word_embedding_dimension\": 384, \"pooling_mode_cls_token\": false,"
    " \"pooling_mode_mean_tokens\": true, \"pooling_mode_max_tokens\": false,"
    " \"pooling_mode_mean_sqrt_len_tokens\": false}";
static const char minilm_sbert[] = "{\"max_seq_length\": 256, \"do_lower_case\": false}";

static void put(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!text) {
        remove(path);
        return;
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void minilm(void)
{
    char sub[300];
    snprintf(sub, sizeof sub, "%s/1_Pooling", dir);
    mkdir(sub, 0755);
    put("config.json", minilm_config);
    put("modules.json", minilm_modules);
    put("1_Pooling/config.json", minilm_pooling);
    put("sentence_bert_config.json", minilm_sbert);
}

static void test_minilm_as_shipped(void **s)
{
    (void)s;
    minilm();
    struct hf_bert_config c;
    struct error err = {0};
    assert_int_equal(hf_bert_config_load(dir, &c, &err), 0);
    assert_int_equal(c.hidden, 384);
    assert_int_equal(c.layers, 6);
    assert_int_equal(c.heads, 12);
    assert_int_equal(c.head_dim, 32);
    assert_int_equal(c.intermediate, 1536);
    assert_int_equal(c.max_positions, 512);
    assert_int_equal(c.vocab, 30522);
    assert_int_equal(c.type_vocab, 2);
    assert_true(c.layer_norm_eps == 1e-12);
    assert_int_equal(c.max_seq_length, 256);   /* sentence-transformers', not the tokenizer's */
    assert_int_equal(c.pooling, POOL_MEAN);
    assert_true(c.normalize);
    /* A plain Hugging Face folder: mean pooling, no normalization, the full length. */
    put("modules.json", NULL);
    put("sentence_bert_config.json", NULL);
    assert_int_equal(hf_bert_config_load(dir, &c, &err), 0);
    assert_int_equal(c.pooling, POOL_MEAN);
    assert_false(c.normalize);
    assert_int_equal(c.max_seq_length, 512);
    /* The tokenizer's model_max_length where smaller, as sentence-transformers
     * cuts (it was the position table's end: another vector for a long text);
     * "no limit" (1e30) leaves the table's. */
    put("tokenizer_config.json", "{\"model_max_length\": 16}");
    assert_int_equal(hf_bert_config_load(dir, &c, &err), 0);
    assert_int_equal(c.max_seq_length, 16);
    put("tokenizer_config.json", "{\"model_max_length\": 1000000000000000019884624838656}");
    assert_int_equal(hf_bert_config_load(dir, &c, &err), 0);
    assert_int_equal(c.max_seq_length, 512);
    put("tokenizer_config.json", "{\"model_max_length\": 1}");
    assert_int_equal(hf_bert_config_load(dir, &c, &err), -BG_ECONFIG);
    assert_non_null(strstr(err.msg, "tokenizer_config.json: model_max_length: 1 leaves no room"));
    put("tokenizer_config.json", "{\"model_max_length\": 0}");   /* was ignored */
    assert_int_equal(hf_bert_config_load(dir, &c, &err), -BG_ECONFIG);
    assert_non_null(strstr(err.msg, "model_max_length: 0 leaves no room"));
    put("tokenizer_config.json", "{\"model_max_length\": \"12\"}");   /* was ignored: 512 */
    assert_int_equal(hf_bert_config_load(dir, &c, &err), -BG_ECONFIG);
    assert_non_null(strstr(err.msg, "model_max_length: must be a number of tokens"));
    put("tokenizer_config.json", "{\"model_max_length\": 16.5}");   /* was ignored: 512 */
    assert_int_equal(hf_bert_config_load(dir, &c, &err), -BG_ECONFIG);
    assert_non_null(strstr(err.msg, "model_max_length: 16.5 is not a whole number of tokens"));
    /* sentence_bert_config's own max_seq_length decides alone, as in
     * sentence-transformers (the tokenizer's 1 refused a folder saying 32). */
    put("sentence_bert_config.json", "{\"max_seq_length\": 32}");
    put("tokenizer_config.json", "{\"model_max_length\": 1}");
    assert_int_equal(hf_bert_config_load(dir, &c, &err), 0);
    assert_int_equal(c.max_seq_length, 32);
    put("sentence_bert_config.json", NULL);
    put("tokenizer_config.json", NULL);
    /* A table of one position: refused naming it (it failed at the warmup). */
    char one[sizeof minilm_config];
    snprintf(one, sizeof one, "%s", minilm_config);
    memcpy(strstr(one, "512"), "1  ", 3);
    put("config.json", one);
    assert_int_equal(hf_bert_config_load(dir, &c, &err), -BG_ECONFIG);
    assert_non_null(strstr(err.msg, "config.json: max_position_embeddings: 1 leaves no room"));
    /* CLS pooling. */
    minilm();
    put("1_Pooling/config.json", "{\"word_embedding_dimension\": 384, "
                                 "\"pooling_mode_cls_token\": true}");
    assert_int_equal(hf_bert_config_load(dir, &c, &err), 0);
    assert_int_equal(c.pooling, POOL_CLS);
}

/* One file changed from MiniLM's: refused, the message holding `want`. */
static void refused(const char *file, const char *text, int code, const char *want)
{
    minilm();
    put(file, text);
    struct hf_bert_config c;
    struct error err = {0};
    int rc = hf_bert_config_load(dir, &c, &err);
    if (rc != -code || !strstr(err.msg, want))
        fail_msg("%s = %s: rc %d, \"%s\"; wanted %d with \"%s\"", file, text ? text : "(none)",
                 rc, err.msg, -code, want);
}

static void test_refusals_name_the_field(void **s)
{
    (void)s;
    refused("config.json", "{\"model_type\": \"gpt2\", \"hidden_size\": 8}", BG_ECONFIG,
            "model_type: \"gpt2\"");
    refused("config.json", "{\"hidden_size\": 8}", BG_ECONFIG, "model_type: missing");
    refused("config.json",
            "{\"model_type\": \"bert\", \"hidden_act\": \"gelu_new\", \"hidden_size\": 8}",
            BG_ECONFIG, "hidden_act: \"gelu_new\"");
    refused("config.json",
            "{\"model_type\": \"bert\", \"position_embedding_type\": \"relative_key\"}",
            BG_ECONFIG, "position_embedding_type: \"relative_key\"");
    refused("config.json", "{\"model_type\": \"bert\", \"is_decoder\": true}", BG_ECONFIG,
            "is_decoder");
    refused("config.json", "{\"model_type\": \"bert\", \"num_hidden_layers\": 2}", BG_ECONFIG,
            "hidden_size: expected a positive integer (missing)");
    refused("config.json",
            "{\"model_type\": \"bert\", \"hidden_size\": 384, \"num_hidden_layers\": 0}",
            BG_ECONFIG, "num_hidden_layers: 0, expected an integer from 1 to 1048576");
    refused("config.json",
            "{\"model_type\": \"bert\", \"hidden_size\": 384, \"num_hidden_layers\": 6,"
            " \"num_attention_heads\": 12, \"intermediate_size\": 1536,"
            " \"vocab_size\": 2000000}", BG_ECONFIG,
            "vocab_size: 2000000, expected an integer from 1 to 1048576");
    refused("config.json",
            "{\"model_type\": \"bert\", \"hidden_size\": 384, \"num_hidden_layers\": 6,"
            " \"num_attention_heads\": 5, \"intermediate_size\": 1536, \"vocab_size\": 10}",
            BG_ECONFIG, "num_attention_heads: 5 does not divide hidden_size 384");
    refused("config.json",
            "{\"model_type\": \"bert\", \"hidden_size\": 384, \"num_hidden_layers\": 6,"
            " \"num_attention_heads\": 12, \"intermediate_size\": 1536, \"vocab_size\": 10,"
            " \"layer_norm_eps\": -1}", BG_ECONFIG, "layer_norm_eps");
    refused("config.json",
            "{\"model_type\": \"bert\", \"hidden_size\": 65540, \"num_hidden_layers\": 6,"
            " \"num_attention_heads\": 4, \"intermediate_size\": 1536, \"vocab_size\": 10}",
            BG_ECONFIG, "hidden_size 65540 / intermediate_size 1536: at most 65536");
    refused("config.json", "{\"model_type\": ", BG_ECONFIG, "config.json: line");
    refused("config.json", NULL, BG_EIO, "config.json");
    refused("modules.json",
            "[{\"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"},"
            " {\"path\": \"2_Dense\", \"type\": \"sentence_transformers.models.Dense\"}]",
            BG_ECONFIG, "modules[1].type: \"sentence_transformers.models.Dense\"");
    /* Another package's class of the same last name is another module. */
    refused("modules.json",
            "[{\"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"},"
            " {\"path\": \"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"},"
            " {\"path\": \"2_Normalize\", \"type\": \"mypkg.layers.Normalize\"}]",
            BG_ECONFIG, "modules[2].type: \"mypkg.layers.Normalize\": not implemented");
    refused("modules.json",
            "[{\"path\": \"\", \"type\": \"Transformer\"}]",
            BG_ECONFIG, "modules[0].type: \"Transformer\": not implemented");
    /* The pipeline in order, each module once (read in any order, these
     * were served as the usual pipeline). */
    refused("modules.json",
            "[{\"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"},"
            " {\"path\": \"2_Normalize\", \"type\": \"sentence_transformers.models.Normalize\"},"
            " {\"path\": \"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"}]",
            BG_ECONFIG, "modules[1]: Normalize before the Pooling");
    refused("modules.json",
            "[{\"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"},"
            " {\"path\": \"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"},"
            " {\"path\": \"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"}]",
            BG_ECONFIG, "modules[2]: Pooling again");
    refused("modules.json",
            "[{\"path\": \"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"}]",
            BG_ECONFIG, "modules[0]: Pooling before the Transformer");
    refused("modules.json",
            "[{\"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"}]",
            BG_ECONFIG, "modules.json: no Pooling module");
    refused("1_Pooling/config.json", "{\"pooling_mode_mean_sqrt_len_tokens\": true}", BG_ECONFIG,
            "pooling_mode_mean_sqrt_len_tokens: true: not implemented");
    refused("1_Pooling/config.json",
            "{\"pooling_mode_mean_tokens\": true, \"pooling_mode_max_tokens\": true}", BG_ECONFIG,
            "beside another pooling mode");
    refused("1_Pooling/config.json", "{\"pooling_mode_mean_tokens\": false}", BG_ECONFIG,
            "no pooling_mode_* is true");
    refused("1_Pooling/config.json",
            "{\"word_embedding_dimension\": 768, \"pooling_mode_mean_tokens\": true}", BG_ECONFIG,
            "word_embedding_dimension: 768, but hidden_size is 384");
    refused("sentence_bert_config.json", "{\"max_seq_length\": 1000}", BG_ECONFIG,
            "max_seq_length: 1000, more than max_position_embeddings 512");
    refused("sentence_bert_config.json", "{\"max_seq_length\": 1}", BG_ECONFIG,
            "sentence_bert_config.json: max_seq_length: 1 leaves no room for [CLS] and [SEP]");
}

int main(void)
{
    test_scratch_template(dir, sizeof dir, "test-hf-bert");
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minilm_as_shipped),
        cmocka_unit_test(test_refusals_name_the_field),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (test_scratch_remove(dir) != 0)
        rc = rc ? rc : 1;
    return rc;
}
