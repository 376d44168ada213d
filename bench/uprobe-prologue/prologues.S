.text
.globl f_push
.type f_push,@function
f_push:
  push %rbp
  mov %rdi,%rax
  add %rsi,%rax
  pop %rbp
  ret
.globl f_sub
.type f_sub,@function
f_sub:
  sub $8,%rsp
  mov %rdi,%rax
  add %rsi,%rax
  add $8,%rsp
  ret
.globl f_endbr
.type f_endbr,@function
f_endbr:
  endbr64
  mov %rdi,%rax
  add %rsi,%rax
  ret
.section .note.GNU-stack,"",@progbits
