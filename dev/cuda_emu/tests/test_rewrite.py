"""test_rewrite.py: emucc's source rewrite (emu_rewrite.py), input -> expected output for each form."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from emu_rewrite import kernel_id, rewrite  # noqa: E402


def launch(name, cfg, args, gap=""):
    return ("::emu::launch(%s, ::emu::LaunchConfig(%s).named(\"%s\"), %s[=, emu_args_ = ::std::make_tuple(%s)] { "
            "::std::apply([&](const auto&... emu_a_) { %s(emu_a_...); }, emu_args_); })"
            % (kernel_id(name), cfg, name, gap, args, name))


NOTE = "; { static unsigned long long emu_sn_ = 0; ::emu::static_smem(&emu_sn_, %s); }"


class LaunchRewrite(unittest.TestCase):
    def test_two_argument_config(self):
        self.assertEqual(rewrite("k<<<g, b>>>(x, y);"), launch("k", "g, b", "x, y") + ";")

    def test_four_argument_config_with_nested_parens(self):
        src = "k<<<dim3(n / 32, f(a, b)), 256, smem(1, 2), stream>>>(p, max(1, 2), v[i]);"
        self.assertEqual(rewrite(src), launch("k", "dim3(n / 32, f(a, b)), 256, smem(1, 2), stream", "p, max(1, 2), v[i]") + ";")

    def test_template_kernel(self):
        src = "  matmul<float, 4><<<grid, block, 0, s>>>(out, in);"
        self.assertEqual(rewrite(src), "  " + launch("matmul<float, 4>", "grid, block, 0, s", "out, in") + ";")

    def test_qualified_template_kernel_with_nested_template_argument(self):
        src = "ns::k<std::pair<int, T>, (N > 2)><<<1, 32>>>(a);"
        self.assertEqual(rewrite(src), launch("ns::k<std::pair<int, T>, (N > 2)>", "1, 32", "a") + ";")

    def test_multiline_arguments_keep_line_count(self):
        src = "k<<<g, b>>>\n    (a,\n     b);\nnext();"
        out = rewrite(src)
        self.assertEqual(out, launch("k", "g, b", "a,\n     b", gap="\n    ") + ";\nnext();")
        self.assertEqual(out.count("\n"), src.count("\n"))

    def test_no_arguments_and_two_launches(self):
        src = "a<<<1, 1>>>(); b<<<2, 2>>>(z);"
        self.assertEqual(rewrite(src), launch("a", "1, 1", "") + "; " + launch("b", "2, 2", "z") + ";")

    def test_string_literals_are_untouched(self):
        src = 'printf("k<<<1,1>>>() %s", "x\\"<<<");'
        self.assertEqual(rewrite(src), src)

    def test_raw_string_with_quotes_is_untouched(self):
        src = 'asm(R"x(mov "a <<<)x"); k<<<1, 1>>>(a);'
        self.assertEqual(rewrite(src), 'asm(R"x(mov "a <<<)x"); ' + launch("k", "1, 1", "a") + ";")

    def test_digit_separators_are_not_character_literals(self):
        src = "int n = 1'000'000; k<<<n / 0x1'00, 32>>>(a);"
        self.assertEqual(rewrite(src), "int n = 1'000'000; " + launch("k", "n / 0x1'00, 32", "a") + ";")

    def test_launch_without_arguments_is_an_error(self):
        with self.assertRaises(SyntaxError):
            rewrite("k<<<1, 1>>>;")


class SharedRewrite(unittest.TestCase):
    def test_extern_shared(self):
        self.assertEqual(rewrite("extern __shared__ float buf[];"), "float* buf = (float*)::emu::dynamic_smem();")

    def test_extern_shared_with_alignment_attribute(self):
        src = "extern __shared__ __attribute__((aligned(16))) unsigned char smem[ ];"
        self.assertEqual(rewrite(src), "unsigned char* smem = (unsigned char*)::emu::dynamic_smem();")

    def test_extern_shared_over_two_lines_keeps_line_count(self):
        self.assertEqual(rewrite("extern __shared__\n  float4 buf[];"), "float4* buf = (float4*)::emu::dynamic_smem();\n")

    def test_static_shared(self):
        self.assertEqual(rewrite("__shared__ float tile[32][33];"), "static float tile[32][33];")

    def test_static_shared_in_a_function_is_noted_once_per_launch(self):
        src = "__device__ float f() { __shared__ float a[32], b[4][8]; return a[0]; }"
        self.assertEqual(rewrite(src), "__device__ float f() { static float a[32], b[4][8]"
                         + NOTE % "sizeof(a) + sizeof(b)" + "; return a[0]; }")

    def test_static_shared_in_a_nested_block_of_a_kernel_is_noted(self):
        src = "__global__ void __launch_bounds__(64) k() { if (1) { __shared__ int t; } }"
        self.assertIn(NOTE % "sizeof(t)", rewrite(src))

    def test_static_shared_at_namespace_or_class_scope_gets_no_note(self):
        for src in ('namespace n { __shared__ int t; }', 'extern "C" { __shared__ int t; }',
                    "struct S { int x; }; __shared__ int t;", "__shared__ int t[2];"):
            self.assertNotIn("static_smem", rewrite(src), src)

    def test_braces_in_literals_do_not_mislead_the_scope(self):
        src = 'void h() { puts("}"); } namespace n { char c = \'{\'; __shared__ int t; }'
        self.assertNotIn("static_smem", rewrite(src))
        src = 'void h() { puts("{"); __shared__ int t; }'
        self.assertIn("static_smem", rewrite(src))

    def test_launch_name_is_a_c_string(self):
        out = rewrite('k<T, "a\\b"><<<1, 1>>>();')
        self.assertIn('.named("k<T, \\"a\\\\b\\">")', out)

    def test_shared_in_a_string_literal_is_untouched(self):
        src = 'puts("__shared__ x"); __shared__ int y;'
        self.assertEqual(rewrite(src), 'puts("__shared__ x"); static int y;')
        self.assertTrue(rewrite(src, check=True).startswith('puts("__shared__ x"); static int y; static_assert'))

    def test_pragma_unroll_becomes_an_empty_line(self):
        self.assertEqual(rewrite("#pragma unroll 4\nfor (;;) {}\n#pragma once"), "\nfor (;;) {}\n#pragma once")


class CheckedRewrite(unittest.TestCase):
    """emucc --check: kernels start with the launcher's probe; static shared memory is limited to 48 KiB."""

    def test_kernel_definition_gets_the_entry_probe(self):
        self.assertEqual(rewrite("__global__ void k(float* x) { x[0] = 1; }", check=True),
                         " void k(float* x) { if (::emu::kernel_entry(0, __func__)) return; x[0] = 1; }")

    def test_launch_bounds_give_the_thread_limit(self):
        out = rewrite("template <class T> __global__ void __launch_bounds__(256, 2) k(T* x) {\n}", check=True)
        self.assertIn("if (::emu::kernel_entry((int)(256), __func__)) return;", out)
        self.assertNotIn("__launch_bounds__", out)
        self.assertNotIn("__global__", out)
        self.assertEqual(out.count("\n"), 1)

    def test_launch_bounds_over_two_lines_keep_line_count(self):
        src = "__global__ void __launch_bounds__(f<1, 2>(),\n 2) k(int* x) {\n}\nint after;"
        out = rewrite(src, check=True)
        self.assertIn("if (::emu::kernel_entry((int)(f<1, 2>()), __func__)) return;", out)
        self.assertEqual(out.count("\n"), src.count("\n"))
        self.assertTrue(out.endswith("}\nint after;"))

    def test_kernel_declaration_keeps_no_probe(self):
        self.assertEqual(rewrite('extern "C" __global__ void k(int n);', check=True), 'extern "C"  void k(int n);')

    def test_static_shared_is_limited_to_48_kib(self):
        out = rewrite("__shared__ float a[32][33], b[8];", check=True)
        self.assertTrue(out.startswith("static float a[32][33], b[8];"))
        self.assertIn("static_assert(sizeof(a) + sizeof(b) <= 49152", out)

    def test_plain_rewrite_is_unchanged(self):
        self.assertEqual(rewrite("__global__ void k() {}"), "__global__ void k() {}")


if __name__ == "__main__":
    unittest.main()
