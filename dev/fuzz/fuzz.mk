# Fuzzing the readers (dev/fuzz, docs/fuzzing.md): one libFuzzer harness per reader, built
# with clang's -fsanitize=fuzzer,address,undefined.
#   make fuzz                  runs every harness for FUZZ_SECONDS (default 60) each, keeping
#                              the corpus in build/fuzz/corpus and crashes in build/fuzz/crashes
#   make fuzz-build            builds the harnesses, the planted-bug ones and the seed writer
FUZZ_CC := clang
FUZZ_CFLAGS := -g -O1 -Wall -Wextra -Werror -Wno-unused-function -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=all
FUZZ_HARNESSES := model state shard tokenizer debug_state args manifest eval
FUZZ_SECONDS ?= 60
FUZZ_DEPS := dev/fuzz/fuzz_common.h $(LLMC_HEADERS)

.PHONY: fuzz fuzz-build

build/fuzz/fuzz_%: dev/fuzz/fuzz_%.c $(FUZZ_DEPS)
	@mkdir -p build/fuzz
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< -lm

build/fuzz/planted_%: dev/fuzz/fuzz_%.c $(FUZZ_DEPS)
	@mkdir -p build/fuzz
	$(FUZZ_CC) $(FUZZ_CFLAGS) -DPLANT_BUG -o $@ $< -lm

build/fuzz/make_seeds: dev/fuzz/make_seeds.c $(LLMC_HEADERS)
	@mkdir -p build/fuzz
	$(FUZZ_CC) -O1 -Wall -Wextra -Werror -Wno-unused-function -o $@ $< -lm

fuzz-build: $(FUZZ_HARNESSES:%=build/fuzz/fuzz_%) build/fuzz/planted_shard build/fuzz/planted_tokenizer \
	build/fuzz/make_seeds

fuzz: deps fuzz-build
	@bash dev/fuzz/run.sh seconds $(FUZZ_SECONDS)
