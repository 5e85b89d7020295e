/* cmd_help.c: trainc help: the usage, and each command's text (trainc help COMMAND,
 * trainc COMMAND --help). */
#include <string.h>
#include "cmd.h"

void usage(FILE *f)
{
    fputs("usage: trainc COMMAND [ARGS]\n\n"
          "  check SPEC...                   validate; print layers, parameters, FLOPs, memory\n"
          "  emit SPEC... -o DIR             write the generated sources and plan.json\n"
          "  build SPEC... -o FILE [--device cpu|cuda|both] [--arch LIST] [--bundle DIR] [--set K=V]\n"
          "                                  compile a standalone trainer (with --bundle, -o may\n"
          "                                  be left out: DIR/NAME, NAME the spec's)\n"
          "  run SPEC... [trainer options]   compile in memory (libtcc) and train now\n"
          "  plan SPEC... [--json] [--ranks N [--chunk-kb K]]\n"
          "                                  the static memory plan\n"
          "  data fashion-mnist DIR [--from SRC]\n"
          "                                  convert Debian's Fashion-MNIST to .npy\n"
          "  data text FILE DIR [--val-frac F] [--shard-tokens N] [--tokenizer TOK.json]\n"
          "                                  token shards of a text file (bytes, or BPE)\n"
          "  data sft FILE.jsonl DIR --tokenizer TOK.json --seq-len T [--chat FORMAT] [--pack]\n"
          "                                  fine-tuning examples, the prompts' targets -100\n"
          "  data classify|tags|mlm|pairs FILE DIR --tokenizer TOK.json --model MODEL.json\n"
          "                                  a text classifier's, token classifier's, masked\n"
          "                                  LM's or reward model's padded rows (trainc help data)\n"
          "  import hf DIR -o OUT [--seq-len T] [--adapter ADIR] [--image-size S] [--labels L]\n"
          "            [--task sequence|token|mlm|qa|reward|dpo|simpo|orpo|kto|cpo]\n"
          "                                  a Hugging Face model folder as a spec and weights\n"
          "  export hf SPEC... --weights FILE -o DIR [--tokenizer FILE] [--adapter] [--set K=V]\n"
          "                                  a spec and weights as a Hugging Face model folder\n"
          "  help [COMMAND], --version\n\n"
          "SPEC... is one file with \"model\" and \"train\", or the model file then the train file.\n"
          "`trainc help COMMAND` says more; `trainc help run` lists the trainer options.\n",
          f);
}

/* trainc help COMMAND */
static const struct {
    const char *name, *text;
    int trainer_options;       /* followed by the trainer's options (rt_trainer_options) */
} command_help[] = {
    {"check", "trainc check SPEC... [--set KEY=VALUE]...\n\n"
              "Parses and validates the spec (every error names its file and JSON path), builds the\n"
              "training program and prints the layers, the parameter count, FLOPs per sample, and\n"
              "the activation, arena and parameter bytes. Exit 0, or 1 with the errors.\n", 0},
    {"emit", "trainc emit SPEC... -o DIR [--set KEY=VALUE]...\n\n"
             "Writes the generated sources to DIR: model.h (the memory plan), host.c (the program),\n"
             "kernels_cpu.c, kernels_cuda.cu (its templates #included from templates/cuda/) and\n"
             "plan.json. The same input gives the same bytes. -o DIR is also --out DIR.\n", 0},
    {"build", "trainc build SPEC... -o FILE [--device cpu|cuda|both] [--arch sm_80,sm_90,...]\n"
              "             [--bundle DIR] [--set KEY=VALUE]...\n\n"
              "Compiles a standalone trainer: the host code with $CC (plus $TRAINC_CFLAGS), the CUDA\n"
              "kernels with NVRTC into a cubin per --arch (default sm_80,sm_86,sm_89,sm_90a) and PTX.\n"
              "--device: cpu (the default; both when --arch is given), cuda, or both (the trainer\n"
              "picks at start). --bundle DIR puts the trainer and the libraries it needs in DIR\n"
              "(rpath $ORIGIN/lib), to run where only the NVIDIA driver is installed; the trainer is\n"
              "DIR/NAME, NAME the file name of -o or, without -o, the spec's name. The recomputation\n"
              "policy and the precision given by --set are compiled in; other --set values become\n"
              "the trainer's defaults. -o FILE is also --out FILE.\n", 0},
    {"run", "trainc run SPEC... [trainer options]\n\n"
            "Compiles the trainer in memory (libtcc; the CUDA kernels with NVRTC for the GPU it\n"
            "finds, through the kernel cache) and trains at once. Trainer options, the same for a\n"
            "built trainer:\n", 1},
    {"plan", "trainc plan SPEC... [--json] [--ranks N [--chunk-kb K]] [--set KEY=VALUE]...\n\n"
             "The static memory plan and the recomputation plan: every buffer's size, offset and\n"
             "live range, the arena against the no-reuse sum and the lower bound, the FLOPs that\n"
             "recomputation adds, the replayed instructions and the bytes they write, the GPU's\n"
             "workspace and the total memory_budget_mb counts (no workspace with device cpu);\n"
             "--ranks N: per-rank bytes and traffic under ddp, zero1, zero2,\n"
             "and the most gradient memory zero2 backs at once (4 KB pages on CPUs, K KB chunks on\n"
             "GPUs: the driver's granularity, default 2048). --json gives the plan as data\n"
             "(plan.json's, with \"ranks\" added for --ranks N).\n", 0},
    {"data", "trainc data fashion-mnist DIR [--from SRC]\n"
             "trainc data text FILE DIR [--val-frac F] [--shard-tokens N] [--tokenizer TOK.json]\n"
             "trainc data sft FILE.jsonl DIR --tokenizer TOK.json --seq-len T [--val-frac F]\n"
             "                [--eos TOKEN | --chat llama3|chatml|gemma|phi3|mistral|llama2|zephyr] [--pack]\n"
             "trainc data classify FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json\n"
             "                [--val FILE.jsonl | --val-frac F | --unlabeled] [--text KEY] [--pair KEY]\n"
             "                [--label KEY]\n"
             "trainc data tags FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json\n"
             "                [--val FILE.jsonl | --val-frac F | --unlabeled] [--words KEY] [--tags KEY]\n"
             "                [--all-pieces]\n"
             "trainc data mlm FILE DIR --tokenizer TOK.json --model MODEL.json [--val FILE |\n"
             "                --val-frac F] [--mask-prob P] [--copies K | --dynamic] [--seed S]\n"
             "                [--group]\n"
             "trainc data pairs FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json\n"
             "                [--val FILE.jsonl | --val-frac F] [--prompt KEY] [--chosen KEY]\n"
             "                [--rejected KEY] [--completion KEY] [--label KEY] [--kl-group N]\n"
             "                [--eos TOKEN | --chat FORMAT]\n"
             "trainc data qa FILE.jsonl DIR --tokenizer TOK.json --model MODEL.json\n"
             "                [--val FILE.jsonl | --val-frac F | --unlabeled] [--stride S]\n"
             "trainc data qa FILE.jsonl DIR --answers PRED.npy [--part test|val|train]\n"
             "                [--n-best N] [--max-answer L] [--version-2 [--null-threshold D]]\n"
             "trainc data images SRC DIR --model MODEL.json [--processor FILE]\n"
             "                [--val SRC | --val-frac F | --unlabeled]\n\n"
             "fashion-mnist: Debian's dataset-fashion-mnist (or the IDX files in SRC) as\n"
             "DIR/{train,test}_{x,y}.npy. text: the bytes of FILE as token shards (llm.c's format,\n"
             "vocabulary 256), DIR/train_000000.bin and DIR/val_000000.bin (the last F of the bytes,\n"
             "0 to 0.5, default 0.1); --shard-tokens N: at most N tokens a shard (train_000001.bin,\n"
             "...; default: as many as one shard's header can count). --tokenizer: the ids of a\n"
             "Hugging Face tokenizer.json's BPE, byte-level (GPT-2, Llama 3, Qwen) or\n"
             "SentencePiece-style (Llama 2, Mistral, Gemma), exactly those of tokenizers'\n"
             "Tokenizer.encode on the whole file, read a part at a time; uint16 shards\n"
             "for a vocabulary of at most 65536, else uint32; F is then a fraction of the tokens.\n"
             "sft: supervised fine-tuning examples, {\"prompt\": ..., \"completion\": ...} a line\n"
             "(or with --chat {\"messages\": [...]}, written as that chat template writes it),\n"
             "as DIR/{train,val}_{x,y}.npy [N, T] i32: the ids, and the next ids with -100 where\n"
             "they are the prompt's (not the assistant's) or padding, for a loss with\n"
             "\"ignore_index\": -100; --eos appends that token to each completion and pads with it;\n"
             "the last F of the examples (default 0.1) in val; --pack: as many whole examples\n"
             "a row as fit in its T + 1 ids (attention is not cut between them).\n"
             "classify: a text classifier's examples, {\"text\": ..., \"label\": ...} a line (a\n"
             "second text at --pair's key), as the padded rows of an imported BERT or RoBERTa\n"
             "(MODEL.json gives T and the classes): DIR/{train,val}_{x,types,pos,y}.npy, the ids\n"
             "and type ids of transformers' tokenizer call with truncation and padding to T, each\n"
             "row's positions (the padding a sequence of its own) and the class; val from --val's\n"
             "file or the last F of the examples; --unlabeled: lines without labels, their rows\n"
             "alone as DIR/test_{x,types,pos}.npy for a trainer's --predict DIR/test_x.npy.\n"
             "tags: a token classifier's examples, {\"tokens\": [WORD, ...], \"ner_tags\": [TAG,\n"
             "...]} a line (CoNLL-2003's form in Hugging Face datasets), as the padded rows of an\n"
             "import with --task token (an encoder's or a decoder's token classifier):\n"
             "DIR/{train,val}_{x,types,pos,y,words}.npy, the ids of\n"
             "transformers' tokenizer(words, is_split_into_words=True) cut and padded to T, each\n"
             "word's tag on its first piece and -100 elsewhere (--all-pieces: on every piece),\n"
             "and each token's word (-1 for none); --unlabeled as classify's.\n"
             "mlm: text for an imported masked LM, a line an example, as padded rows with their\n"
             "masks drawn (P of the text tokens chosen, 0.15; of those 80% the mask token, 10% a\n"
             "random id, 10% kept; y their ids, -100 elsewhere), K masks of each training line\n"
             "(--copies), every draw from --seed (1337); --dynamic: the training rows unmasked (y\n"
             "every text token's id) for the trainer's loader.mask, which draws them every epoch.\n"
             "pairs: preferences, {\"chosen\": ..., \"rejected\": ...} a line (TRL's form; a\n"
             "\"prompt\" goes before each), as the rows of an import with --task reward or dpo:\n"
             "DIR/{train,val}_{x,pos,y}.npy, the chosen text's ids (and --eos) padded on the left\n"
             "to T, then the rejected one's (2T a row), each half's positions, y 0 (a reward\n"
             "model) or each answer's next ids (dpo; then the trainer's --reference); a pair\n"
             "with a text past T is left out and counted. --chat FORMAT: lists of messages (a\n"
             "\"prompt\" of them apart, or whole conversations ending in the answer) written\n"
             "as data sft's template writes them. An orpo model's rows also hold t, the chosen\n"
             "text's next ids; a kto model's are TRL's unpaired lines, {\"prompt\": ...,\n"
             "\"completion\": ..., \"label\": true|false}: the completion, then the KL text (the\n"
             "prompt with the completion of the line before in its group of --kl-group, 8),\n"
             "and DIR/{train,val}_label.npy.\n"
             "qa: an extractive question answerer's examples, SQuAD's form a line\n"
             "({\"question\": ..., \"context\": ..., \"answers\": {\"text\": [...],\n"
             "\"answer_start\": [...]}}), as the padded rows of an import with --task qa:\n"
             "DIR/{train,val}_{x,types,pos,y,example,offsets}.npy as transformers' run_qa.py\n"
             "prepares them: the question and a window of the context a row (a long context in\n"
             "windows that overlap by --stride tokens, 128), y the answer's first and last token\n"
             "(0 0 where it is not in the window), each row's example and its context tokens'\n"
             "character offsets (-1 elsewhere); WordPiece and byte-level BPE tokenizers.\n"
             "--answers: a trainer's --predict of DIR's --part rows (test) read back as each\n"
             "example's answer, as run_qa.py's post-processing picks it, into\n"
             "DIR/PART_answers.jsonl, with SQuAD's exact match and F1 where FILE has answers;\n"
             "--version-2: SQuAD 2.0's null answer (\"\") where its score beats the best's by\n"
             "more than D (0), and SQuAD 2.0's scores.\n"
             "images: an image folder, SRC/CLASS/FILE.{png,jpg,jpeg} (imagefolder's layout), as\n"
             "an imported image classifier's DIR/{train,val}_{x,y}.npy: each image converted to\n"
             "the model's channels as Pillow does, resized and cropped as its image processor\n"
             "does (--processor FILE, else the preprocessor_config.json import kept beside\n"
             "MODEL.json, else a resize to its side, bilinear), u8 [N, C, S, S]; the class the\n"
             "folder's name among the model's labels; val from --val's folder or the last F of\n"
             "each class's files; --unlabeled: SRC's images alone, DIR/test_x.npy and\n"
             "DIR/test_files.txt.\n", 0},
    {"import", "trainc import hf DIR -o OUT [--seq-len T] [--adapter ADIR] [--image-size S]\n"
               "                 [--labels N|NAME,NAME,...] [--task sequence|token|mlm|qa|reward|dpo|simpo|orpo|kto|cpo]\n\n"
               "Reads a Hugging Face model folder: config.json and model.safetensors, or the\n"
               "files model.safetensors.index.json names (F32, F16 or BF16, read as fp32).\n"
               "GPT-2, OPT, GPT-Neo, GPTBigCode (StarCoder), Llama (Llama 3's rope scaling\n"
               "included), Mistral, Phi-3 and Phi-4 (longrope, Phi-4-mini's partial rope),\n"
               "Qwen2, Qwen3, Gemma, Gemma 2, Gemma 3, SmolLM3, Granite, StarCoder2, StableLM,\n"
               "Nemotron, GPT-NeoX (Pythia), Phi-2, Falcon, GPT-J, OLMo, OLMo 2, GLM, Cohere,\n"
               "Cohere 2 and the mixtures of experts Mixtral, OLMoE and Qwen3-MoE; the image\n"
               "classifiers ViT, DeiT, ResNet, ConvNeXt and ConvNeXt V2 (--image-size: a ResNet's\n"
               "images' side, 224; a ConvNeXt's, its image_size); the text classifiers BERT,\n"
               "RoBERTa, DistilBERT and ELECTRA, a class for each text or each token, their\n"
               "masked LMs and question answerers (--task; --labels: a new classifier for\n"
               "these classes, over the encoder of any of their models: BertModel,\n"
               "BertForMaskedLM; and over ViTModel, DeiTModel (or a distilled DeiT's encoder),\n"
               "ResNetModel, ConvNextModel; --task qa: a new question answerer); the\n"
               "language models' sequence classifiers\n"
               "(LlamaForSequenceClassification and its kin; --labels: a new one over a\n"
               "language model), and their reward models (one output: a pair of texts a row,\n"
               "data pairs; --task reward: a new one over a language model); their token\n"
               "classifiers (GPT2ForTokenClassification and its kin; --task token --labels:\n"
               "a new one over a language model; data tags' rows); --task dpo: a\n"
               "language model for direct preference optimization (data pairs, --reference);\n"
               "--task simpo, orpo, cpo: for SimPO, ORPO, CPO (data pairs; no reference)\n"
               "--task kto: for KTO (data pairs of completions labelled good or bad;\n"
               "--reference)\n"
               "(docs/commands.md says which configs); a config key or a tensor trainc cannot\n"
               "express exits 1 naming it, and nothing is written. Writes OUT/model.json\n"
               "(the model spec), OUT/train.json (training defaults to edit: data paths, steps,\n"
               "learning rate) and OUT/init.safetensors (the weights under trainc's names).\n"
               "--seq-len T: the windows' length (default the model's maximum, at most 1024).\n"
               "--adapter ADIR: PEFT's LoRA adapter files (adapter_config.json,\n"
               "adapter_model.safetensors) merged into the weights as merge_and_unload does.\n"
               "Then:\n"
               "  trainc run OUT/model.json OUT/train.json --init OUT/init.safetensors\n", 0},
    {"export", "trainc export hf SPEC... --weights FILE -o DIR [--tokenizer FILE] [--adapter]\n"
               "                 [--set K=V]...\n\n"
               "Writes DIR/config.json and DIR/model.safetensors (fp32) that transformers'\n"
               "AutoModelForCausalLM.from_pretrained(DIR) loads and that compute the same\n"
               "logits, for a model of a shape trainc import hf writes; its layers pick the\n"
               "family (docs/commands.md's table): GPT-2's (learned positions; a relu MLP OPT,\n"
               "bias \"proj\" GPT-Neo), Llama's (rmsnorms: Mistral with a window, Qwen2 with bias\n"
               "\"qkv\", Qwen3 with qk_norm, SmolLM3, Phi-3 with longrope, Gemma with the\n"
               "embedding scaled by sqrt(d), Gemma 2 and 3 with a norm after each branch, OLMo 2\n"
               "with norms after the branches alone, GLM with a partial rope, Granite with scale\n"
               "layers, Mixtral, OLMoE and Qwen3-MoE with a moe MLP) or the layernorm families'\n"
               "(StarCoder2, StableLM, Nemotron, GPT-NeoX, Falcon, Phi, GPT-J, Cohere, Cohere 2\n"
               "with windows, OLMo: by the MLP and whether the branches run in parallel); an\n"
               "image classifier's as ViTForImageClassification, DeiTForImageClassification,\n"
               "ResNetForImageClassification or ConvNextForImageClassification (V2) with its\n"
               "preprocessor_config.json (the import's image processor, else a ViT's). A\n"
               "layer such a model has no place for exits 1 naming it. --tokenizer FILE is\n"
               "copied to DIR/tokenizer.json. A lora run's adapters (SPEC with its lora) are\n"
               "merged into their weights; with --adapter, DIR gets them alone, as PEFT's\n"
               "adapter_config.json and adapter_model.safetensors. --set changes SPEC as trainc\n"
               "run's does (the run's --set lora.rank=...).\n", 0},
    {"help", "trainc help [COMMAND]\n\nThe commands, or one command's usage.\n", 0},
};

int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        usage(stdout);
        return 0;
    }
    if (argc > 2)
        error_input("help: one command at a time (got '%s' after '%s')", argv[2], argv[1]);
    const char *names[sizeof command_help / sizeof *command_help + 1] = {0};
    for (size_t i = 0; i < sizeof command_help / sizeof *command_help; i++) {
        if (!strcmp(argv[1], command_help[i].name)) {
            fputs(command_help[i].text, stdout);
            if (command_help[i].trainer_options)
                rt_trainer_options(stdout, NULL);
            return 0;
        }
        names[i] = command_help[i].name;
    }
    const char *near = rt_closest(argv[1], names);
    error_input("help: unknown command '%s'%s%s%s", argv[1], near ? "; did you mean '" : "",
                near ? near : "", near ? "'?" : "");
}
