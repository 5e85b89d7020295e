# trainc: build, install, test, demo, bench.  `make help` lists the targets.
CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -ffp-contract=off -fno-math-errno -fPIC
PREFIX  ?= /usr/local
PYTHON  ?= /usr/bin/python3
CUDA_HOME ?= /usr/local/cuda
B       := build
# the build inside demo, test and check: one compile per core
NPROC   ?= $(shell nproc 2>/dev/null || echo 2)

RT_SRC  := $(wildcard runtime/*.c)
RT_OBJ  := $(RT_SRC:runtime/%.c=$(B)/rt/%.o)
CC_SRC  := $(wildcard compiler/*.c compiler/ops/*.c)
CC_OBJ  := $(CC_SRC:compiler/%.c=$(B)/cc/%.o) $(B)/cc/templates.o
CC_HDR  := $(wildcard compiler/*.h compiler/ops/*.h)
# MPI (runtime/dist.c): the wrapper compiler knows where Debian keeps mpi.h and libmpi
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null || pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null || pkg-config --libs ompi-c 2>/dev/null || echo -lmpi)
LIBS    := -lcjson -lopenblas -lz -lm -lpthread -ldl $(MPI_LIBS)
TCC_LIB := -ltcc
# trainc alone (trainc data images' JPEG decoder); trainers do not link it
CC_LIBS := -ljpeg

.PHONY: all install deps deps-deb demo test check bench regen clean help
all: $(B)/trainc

# the runtime's loops are worth vectorizing (no fast-math: results do not change;
# -fno-trapping-math only lets loops with selects, like rt_tanhf's, vectorize: nothing
# reads the floating-point exception flags)
# The CUDA headers are needed to build the runtime (cuda.h, nvrtc.h, cublasLt.h); the
# libraries are not linked: the device layer loads them when a trainer meets a GPU.
$(B)/rt/%.o: CFLAGS += -O3 -fno-trapping-math -I$(CUDA_HOME)/include
$(B)/rt/%.o: runtime/%.c runtime/rt.h runtime/rt_loop.h runtime/trainc_rt.h runtime/rt_cuda.h \
              runtime/run.h runtime/rt_dist.h | $(B)/rt
	$(CC) $(CFLAGS) -c $< -o $@
# only dist.c includes mpi.h
$(B)/rt/dist.o: runtime/dist.c runtime/rt.h runtime/trainc_rt.h runtime/rt_dist.h | $(B)/rt
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -c $< -o $@
$(B)/cc/%.o: compiler/%.c $(CC_HDR) runtime/rt.h runtime/trainc_rt.h | $(B)/cc/ops
	$(CC) $(CFLAGS) -c $< -o $@
$(B)/cc/build.o: override CFLAGS += -I$(CUDA_HOME)/include
$(B)/cc/data_cmd.o $(B)/rt/tokenizer.o $(B)/rt/mode_sample.o $(B)/rt/wordpiece.o: runtime/tokenizer.h runtime/wordpiece.h
$(B)/rt/conv_direct.o: runtime/conv_direct_isa.h
# trainc build links trainers with these too (override: survives CFLAGS=... on the
# command line, as the sanitizer build passes it)
$(B)/cc/cmd_build.o: override CFLAGS += -DTRAINC_LINK_EXTRA='"$(MPI_LIBS)"'
$(B)/rt/ddp.o $(B)/rt/dist.o $(B)/rt/zero.o $(B)/rt/ckpt.o: runtime/rt_dist.h

$(B)/rt $(B)/cc $(B)/cc/ops:
	mkdir -p $@

# templates/ are compiled into trainc as C strings (tmpl_cuda_<name>), and listed in
# the order a generated kernels_cuda.cu holds them: prelude, common, the rest by name
TMPL := $(wildcard templates/cuda/*.cuh)
TMPL_ORDER = $(filter %/prelude.cuh,$(TMPL)) $(filter %/common.cuh,$(TMPL)) \
             $(sort $(filter-out %/prelude.cuh %/common.cuh,$(TMPL)))
$(B)/cc/templates.c: $(TMPL) | $(B)/cc
	{ for f in $(TMPL_ORDER); do n=$$(basename $$f .cuh); echo "const char tmpl_cuda_$$n[] ="; \
	  sed 's/\\/\\\\/g; s/"/\\"/g; s/^/    "/; s/$$/\\n"/' $$f; echo ";"; done; \
	  echo "const char *const tmpl_cuda_files[] = {"; \
	  for f in $(TMPL_ORDER); do echo "    tmpl_cuda_$$(basename $$f .cuh),"; done; echo "    0};"; \
	  echo "const char *const tmpl_cuda_names[] = {"; \
	  for f in $(TMPL_ORDER); do echo "    \"$$(basename $$f)\","; done; echo "    0};"; } > $@
$(B)/cc/templates.o: $(B)/cc/templates.c
	$(CC) $(CFLAGS) -c $< -o $@

$(B)/librt.a: $(RT_OBJ)
	rm -f $@ && ar rcs $@ $^

# -rdynamic: JIT-compiled trainers resolve rt_* (and libm) from this process; the
# whole runtime goes in, also what trainc itself never calls (the kernels).
$(B)/trainc: $(CC_OBJ) $(B)/librt.a
	$(CC) $(CFLAGS) -rdynamic -o $@ $(CC_OBJ) -Wl,--whole-archive $(B)/librt.a -Wl,--no-whole-archive $(TCC_LIB) $(CC_LIBS) $(LIBS)

install: $(B)/trainc
	install -d $(PREFIX)/bin $(PREFIX)/lib/trainc/include $(PREFIX)/lib/trainc/templates
	install -m 755 $(B)/trainc $(PREFIX)/bin/trainc
	install -m 644 $(B)/librt.a $(PREFIX)/lib/trainc/librt.a
	install -m 644 runtime/trainc_rt.h $(PREFIX)/lib/trainc/include/trainc_rt.h
	cp -r templates/. $(PREFIX)/lib/trainc/templates/

# The Debian packages the project needs: installed when root, else printed (jinja2:
# transformers' chat templates, tests/data_sft.py's oracle; pil: tests/data_images.py's;
# libjpeg-dev: trainc data images' JPEG decoder).
DEB_PKGS := build-essential libcjson-dev libtcc-dev tcc libopenblas-dev zlib1g-dev libjpeg-dev \
            python3 python3-torch python3-numpy python3-venv python3-jinja2 python3-pil dataset-fashion-mnist \
            openmpi-bin libopenmpi-dev patchelf xxhash
# The Hugging Face oracles: transformers from PyPI in venvs over Debian's torch
# (--system-site-packages). 4.40.2, the parity tests' (HF_PYTHON), runs on Debian's torch
# 1.13; so does 4.48.3 (HF_NEW_PYTHON), whose Gemma 2, Granite, Phi-3, Nemotron, OLMo 2,
# GLM and Cohere 2 classes tests/hf_io.py --newer loads (4.50 on need torch 2). Each made once; its stamp names the version,
# so a new pin installs again. An interpreter given on the command line is used as it is.
HF_VENV          ?= .venv/hf
HF_PYTHON        ?= $(HF_VENV)/bin/python
TRANSFORMERS     := 4.40.2
HF_NEW_VENV      ?= .venv/hf-new
HF_NEW_PYTHON    ?= $(HF_NEW_VENV)/bin/python
TRANSFORMERS_NEW := 4.48.3
PEFT := 0.10.0
SENTENCEPIECE := 0.2.3
PROTOBUF := 7.36.2
HF_DEPS :=
ifeq ($(HF_PYTHON),$(HF_VENV)/bin/python)
HF_DEPS += $(HF_VENV)/.transformers-$(TRANSFORMERS) $(HF_VENV)/.peft-$(PEFT) \
           $(HF_VENV)/.sentencepiece-$(SENTENCEPIECE)
endif
ifeq ($(HF_NEW_PYTHON),$(HF_NEW_VENV)/bin/python)
HF_DEPS += $(HF_NEW_VENV)/.transformers-$(TRANSFORMERS_NEW)
endif
# TensorBoard, the reader of the events files trainers write (tests/tb_events.py,
# TB_PYTHON): in a venv of its own, so that its protobuf stays out of the oracles'
TB_VENV          ?= .venv/tb
TB_PYTHON        ?= $(TB_VENV)/bin/python
TENSORBOARD      := 2.21.0
ifeq ($(TB_PYTHON),$(TB_VENV)/bin/python)
HF_DEPS += $(TB_VENV)/.tensorboard-$(TENSORBOARD)
endif
deps: deps-deb $(HF_DEPS)

# pip_venv VENV PACKAGE VERSION [MODULE]: the rule that makes VENV (over Debian's Python
# packages) with PACKAGE==VERSION, checked by importing it (and MODULE: torch, Debian's)
define pip_venv
$(1)/.$(2)-$(3): | deps-deb
	@echo "deps: $(2)==$(3) into $(1)"
	@rm -f $(1)/.$(2)-*
	/usr/bin/python3 -m venv --system-site-packages $(1)
	@$(1)/bin/pip install -q --disable-pip-version-check '$(2)==$(3)' || \
	  { echo "deps: pip could not install $(2)==$(3) (no network?): run make deps again," \
	    "or set the interpreter (HF_PYTHON, HF_NEW_PYTHON, TB_PYTHON) to one that has it"; exit 1; }
	@$(1)/bin/python -c 'import $(2); $(if $(4),import $(4);) assert $(2).__version__ == "$(3)"'
	@touch $$@
endef
$(eval $(call pip_venv,$(HF_VENV),transformers,$(TRANSFORMERS),torch))
# PEFT beside transformers 4.40.2, the oracle of export --adapter's files (tests/hf_io.py):
# without its dependencies, which would bring a torch 2 over Debian's (accelerate's
# pinned to one that reads torch 1.13; psutil and yaml come with python3-torch)
$(HF_VENV)/.peft-$(PEFT): $(HF_VENV)/.transformers-$(TRANSFORMERS)
	@echo "deps: peft==$(PEFT) into $(HF_VENV)"
	@rm -f $(HF_VENV)/.peft-*
	@$(HF_VENV)/bin/pip install -q --disable-pip-version-check --no-deps 'peft==$(PEFT)' \
	  'accelerate==0.29.3' || { echo "deps: pip could not install peft==$(PEFT) (no network?)"; exit 1; }
	@$(HF_VENV)/bin/python -c 'import peft, torch; assert peft.__version__ == "$(PEFT)"'
	@touch $@
# sentencepiece (and the protobuf transformers reads its models with) beside it: the
# Unigram tokenizers XLM-RoBERTa's tokenizer.json is converted from (tests/xlmr_hf.py)
$(HF_VENV)/.sentencepiece-$(SENTENCEPIECE): $(HF_VENV)/.transformers-$(TRANSFORMERS)
	@echo "deps: sentencepiece==$(SENTENCEPIECE) into $(HF_VENV)"
	@rm -f $(HF_VENV)/.sentencepiece-*
	@$(HF_VENV)/bin/pip install -q --disable-pip-version-check 'sentencepiece==$(SENTENCEPIECE)' \
	  'protobuf==$(PROTOBUF)' || { echo "deps: pip could not install sentencepiece==$(SENTENCEPIECE) (no network?)"; exit 1; }
	@$(HF_VENV)/bin/python -c 'import sentencepiece, google.protobuf; assert sentencepiece.__version__ == "$(SENTENCEPIECE)"'
	@touch $@
$(eval $(call pip_venv,$(HF_NEW_VENV),transformers,$(TRANSFORMERS_NEW),torch))
$(eval $(call pip_venv,$(TB_VENV),tensorboard,$(TENSORBOARD)))
deps-deb:
	@missing=$$(for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -z "$$missing" ]; then echo "deps: all installed"; \
	elif [ "$$(id -u)" = 0 ]; then \
	  echo "deps: installing $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else echo "deps: run as root:  apt-get install -y $$missing"; exit 1; fi

data/fashion/train_x.npy: $(B)/trainc
	$(B)/trainc data fashion-mnist data/fashion

# a character-level corpus from what every Debian system ships: its license texts
data/text/train_000000.bin: $(B)/trainc
	mkdir -p $(B)
	find /usr/share/common-licenses -type f | LC_ALL=C sort | xargs cat > $(B)/licenses.txt
	$(B)/trainc data text $(B)/licenses.txt data/text

demo: deps-deb
	$(MAKE) -j$(NPROC) all
	$(MAKE) data/fashion/train_x.npy
	$(B)/trainc build specs/mlp_fashion.json -o $(B)/mlp_fashion
	$(B)/mlp_fashion --out runs/mlp_fashion
	@$(PYTHON) -c 'import json; r = [json.loads(l) for l in open("runs/mlp_fashion/metrics.jsonl") if "val_acc" in l][-1]; print("final test accuracy (Fashion-MNIST test set, %d steps): %.2f%%" % (r["step"], 100 * r["val_acc"]))'

# tests/run_all.sh: JOBS checks at a time (2), TESTS='PATTERN ...' for some of them;
# `make check` is its quick tier (the inner loop, under 5 minutes)
JOBS ?= 2
test: deps
	$(MAKE) -j$(NPROC) all
	$(MAKE) -j$(NPROC) data/fashion/train_x.npy data/text/train_000000.bin
	JOBS='$(JOBS)' TESTS='$(TESTS)' HF_PYTHON='$(HF_PYTHON)' HF_NEW_PYTHON='$(HF_NEW_PYTHON)' \
	  TB_PYTHON='$(TB_PYTHON)' bash tests/run_all.sh

check: deps
	$(MAKE) -j$(NPROC) all
	$(MAKE) -j$(NPROC) data/fashion/train_x.npy data/text/train_000000.bin
	JOBS='$(JOBS)' TESTS='$(TESTS)' TIER=check HF_PYTHON='$(HF_PYTHON)' \
	  HF_NEW_PYTHON='$(HF_NEW_PYTHON)' TB_PYTHON='$(TB_PYTHON)' bash tests/run_all.sh

bench: all data/fashion/train_x.npy
	bash bench/run.sh

# generated/<name>/ is `trainc emit specs/<name>.json`, checked in (tests/golden.sh)
regen: $(B)/trainc
	@for s in specs/*.json; do n=$$(basename $$s .json); rm -rf generated/$$n; \
	  $(B)/trainc emit $$s -o generated/$$n && echo "generated/$$n"; done

clean:
	rm -rf $(B)

help:
	@echo "make          build build/trainc"
	@echo "make deps     the Debian packages (as root), transformers 4.40.2 and 4.48.3 in .venv/hf, .venv/hf-new,"
	@echo "              tensorboard 2.21.0 in .venv/tb"
	@echo "make demo     install deps, build, convert Fashion-MNIST, train specs/mlp_fashion.json"
	@echo "make test     the whole test suite (JOBS=2 at a time, TESTS='PATTERN ...' for some)"
	@echo "make check    its quick tier: unit, golden, verify, bad input, cli, a parity"
	@echo "make bench    trainc vs PyTorch samples/s"
	@echo "make install PREFIX=/usr/local"

# tests/gpu/check_ops.c: every CUDA kernel against its CPU twin. test-gpu-build builds
# it anywhere; test-gpu runs it, which needs a GPU (without one it exits 2 with the
# runtime's "no CUDA device found").
.PHONY: test-gpu test-gpu-build
test-gpu-build: $(B)/tests/gpu/check_ops $(B)/tests/gpu/bench_attn $(B)/tests/gpu/fp8_lt_check
$(B)/tests/gpu/check_ops: tests/gpu/check_ops.c $(B)/librt.a runtime/rt_cuda.h runtime/rt.h runtime/trainc_rt.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Iruntime -I$(CUDA_HOME)/include $< $(B)/librt.a $(LIBS) -o $@
# tests/gpu/bench_attn.c: the attention kernels timed alone (bench/gpu_attention.sh)
$(B)/tests/gpu/bench_attn: tests/gpu/bench_attn.c $(B)/librt.a runtime/rt_cuda.h runtime/rt.h runtime/rt_half.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Iruntime -I$(CUDA_HOME)/include $< $(B)/librt.a $(LIBS) -o $@
# tests/fake_gpu/fp8_lt_check.c against the toolkit's own cuBLASLt: its --probe says on
# a GPU which FP8 GEMM settings that cuBLASLt takes (bench/gpu_fp8.sh runs it)
$(B)/tests/gpu/fp8_lt_check: tests/fake_gpu/fp8_lt_check.c tests/gpu/emu/cuda_fp8.h runtime/rt_half.h
	@mkdir -p $(@D)
	$(CC) -std=gnu11 -O2 -Iruntime -I$(CUDA_HOME)/include $< -L$(CUDA_HOME)/lib64 \
	    -l:libcublasLt.so.13 -l:libnvrtc.so.13 -ldl -lm -o $@
test-gpu: $(B)/tests/gpu/check_ops
	$(B)/tests/gpu/check_ops

# libFuzzer targets (fuzz/README.md): the npy, shard and safetensors readers, the
# checkpoint state reader, the spec loader + compiler, a trainer's command line,
# `trainc data fashion-mnist`'s IDX reader, the BPE tokenizer, `trainc import hf` and
# `trainc data sft`, built with clang, AddressSanitizer and UBSan. `make fuzz` runs each
# for FUZZ_SECONDS on its corpus in fuzz/corpus/ (not part of `make test`).
FUZZ_SECONDS ?= 60
FUZZ_CC      ?= clang
FUZZ_FLAGS   := -O1 -g -std=gnu11 -fno-omit-frame-pointer -ffp-contract=off -fno-math-errno \
                -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_RT_OBJ  := $(RT_SRC:runtime/%.c=$(B)/fuzz/rt/%.o)
FUZZ_CC_OBJ  := $(CC_SRC:compiler/%.c=$(B)/fuzz/cc/%.o) $(B)/fuzz/cc/templates.o
FUZZ_TARGETS := npy shard safetensors spec ckpt opts idx tokenizer hf sft rows image
.PHONY: fuzz fuzz-build
$(B)/fuzz/rt/%.o: runtime/%.c runtime/rt.h runtime/trainc_rt.h
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -I$(CUDA_HOME)/include $(MPI_CFLAGS) -c $< -o $@
$(B)/fuzz/cc/%.o: compiler/%.c $(CC_HDR) runtime/rt.h
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -I$(CUDA_HOME)/include -Dmain=trainc_main \
	    -DTRAINC_LINK_EXTRA='"$(MPI_LIBS)"' -c $< -o $@
$(B)/fuzz/cc/templates.o: $(B)/cc/templates.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -c $< -o $@
$(B)/fuzz/fuzz_spec $(B)/fuzz/fuzz_idx $(B)/fuzz/fuzz_hf $(B)/fuzz/fuzz_sft $(B)/fuzz/fuzz_rows $(B)/fuzz/fuzz_image: $(B)/fuzz/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz.h $(FUZZ_CC_OBJ) $(FUZZ_RT_OBJ)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer -Wl,--wrap=exit -Iruntime $< $(FUZZ_CC_OBJ) \
	    $(FUZZ_RT_OBJ) $(TCC_LIB) $(CC_LIBS) $(LIBS) -o $@
$(B)/fuzz/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz.h $(FUZZ_RT_OBJ)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer -Wl,--wrap=exit -Iruntime $< $(FUZZ_RT_OBJ) \
	    $(LIBS) -o $@
fuzz-build: $(FUZZ_TARGETS:%=$(B)/fuzz/fuzz_%)
fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do mkdir -p fuzz/corpus/$$t $(B)/fuzz/new/$$t; \
	  echo "fuzz_$$t: $(FUZZ_SECONDS) s"; \
	  ASAN_OPTIONS=detect_leaks=0 $(B)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) \
	    -fork=1 -ignore_ooms=1 -close_fd_mask=3 -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
	    -artifact_prefix=$(B)/fuzz/ $(B)/fuzz/new/$$t fuzz/corpus/$$t || exit 1; done
