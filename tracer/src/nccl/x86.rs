//! A small data-flow reading of one x86-64 function's machine code: which
//! registers hold an argument pointer, which hold a value loaded from a
//! field of it, and what the function then does with them. Enough to read
//! a field offset out of a getter (`*out = comm->rank`), a magic check, or
//! an atomic counter update, without running the code.
//!
//! The walk follows the function's branches from its entry: a register
//! keeps what it was last given on the path, and loses it when anything
//! else writes it or a call may clobber it. NCCL's getters and checks keep
//! the argument pointers in callee-saved registers from the prologue on,
//! which this handles; anything it cannot follow yields no fact, never a
//! guess.

use std::collections::HashMap;

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess,
    OpKind, Register,
};

/// What a register is known to hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// The `n`-th (0-based) integer argument, as it was at entry.
    Arg(u8),
    /// `size` bytes loaded from argument `arg` at `disp`.
    Field { arg: u8, disp: i64, size: usize },
    /// A 64-bit constant.
    Const(u64),
}

/// Facts the sweep found, in address order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Fact {
    /// `size` bytes loaded from argument `arg` at `disp`.
    Load { arg: u8, disp: i64, size: usize },
    /// The field `disp` of argument `from` (`size` bytes) stored through
    /// argument `to` (`*to = from->field`).
    StoreField {
        to: u8,
        from: u8,
        disp: i64,
        size: usize,
    },
    /// A 64-bit compare of argument `arg`'s field `disp` with a constant.
    CompareConst { arg: u8, disp: i64, value: u64 },
    /// `lock add qword [base + index*scale + disp], imm`, with the
    /// immediates added to the index register since it was last set folded
    /// into `disp` (`index*scale` then is the plain index value).
    LockAdd { scale: u32, disp: i64, imm: u64 },
    /// A direct call.
    Call { target: u64 },
}

/// The integer argument registers of the System V x86-64 ABI.
const ARG_REGS: [Register; 6] = [
    Register::RDI,
    Register::RSI,
    Register::RDX,
    Register::RCX,
    Register::R8,
    Register::R9,
];

/// Registers a call may change (caller-saved).
const CLOBBERED: [Register; 9] = [
    Register::RAX,
    Register::RCX,
    Register::RDX,
    Register::RSI,
    Register::RDI,
    Register::R8,
    Register::R9,
    Register::R10,
    Register::R11,
];

/// What the registers hold at one point of a path.
#[derive(Clone, Default)]
struct State {
    roles: HashMap<Register, Role>,
    /// Immediates added to a register since something else last wrote it.
    added: HashMap<Register, i64>,
    /// `%rsp` relative to its value at entry, while it can be followed.
    rsp: Option<i64>,
    /// `%rbp` relative to `%rsp` at entry, once a frame set it.
    rbp: Option<i64>,
    /// Roles spilled to the stack, by address relative to `%rsp` at entry.
    slots: HashMap<i64, Role>,
}

impl State {
    /// The entry-relative stack address of a memory operand on `%rsp` or
    /// `%rbp`.
    fn slot_of(&self, ins: &Instruction) -> Option<i64> {
        if ins.memory_index() != Register::None {
            return None;
        }
        let disp = ins.memory_displacement64() as i64;
        match ins.memory_base() {
            Register::RSP => Some(self.rsp? + disp),
            Register::RBP => Some(self.rbp? + disp),
            _ => None,
        }
    }

    /// Follows `%rsp`/`%rbp` and the stack slots through one instruction
    /// (before the registers it writes lose their roles).
    fn track_stack(&mut self, ins: &Instruction) {
        let imm = |i: &Instruction| i.op_count() == 2 && is_immediate(i.op1_kind());
        let op0_is = |r: Register| ins.op0_kind() == OpKind::Register && ins.op0_register() == r;
        // A store into a slot: a spilled role, or anything else (forgets).
        if ins.op_count() >= 1
            && ins.op0_kind() == OpKind::Memory
            && !matches!(ins.mnemonic(), Mnemonic::Cmp | Mnemonic::Test)
        {
            if let Some(at) = self.slot_of(ins) {
                let size = ins.memory_size().size().max(1) as i64;
                self.slots.retain(|&k, _| k + 8 <= at || k >= at + size);
                if ins.mnemonic() == Mnemonic::Mov
                    && ins.op1_kind() == OpKind::Register
                    && ins.op1_register().size() == 8
                {
                    if let Some(&role) = self.roles.get(&full(ins.op1_register())) {
                        self.slots.insert(at, role);
                    }
                }
            }
        }
        match ins.mnemonic() {
            Mnemonic::Push => {
                self.rsp = self.rsp.map(|r| r - 8);
                if let Some(r) = self.rsp {
                    self.slots.remove(&r);
                }
            }
            Mnemonic::Pop => self.rsp = self.rsp.map(|r| r + 8),
            Mnemonic::Call | Mnemonic::Ret => {}
            Mnemonic::Sub if op0_is(Register::RSP) && imm(ins) => {
                self.rsp = self.rsp.map(|r| r - ins.immediate(1) as i64)
            }
            Mnemonic::Add if op0_is(Register::RSP) && imm(ins) => {
                self.rsp = self.rsp.map(|r| r + ins.immediate(1) as i64)
            }
            Mnemonic::Mov
                if op0_is(Register::RBP)
                    && ins.op1_kind() == OpKind::Register
                    && ins.op1_register() == Register::RSP =>
            {
                self.rbp = self.rsp
            }
            Mnemonic::Lea
                if op0_is(Register::RSP)
                    && ins.memory_base() == Register::RBP
                    && ins.memory_index() == Register::None =>
            {
                self.rsp = self.rbp.map(|b| b + ins.memory_displacement64() as i64)
            }
            _ if op0_is(Register::RSP) => {
                self.rsp = None;
                self.slots.clear();
            }
            _ if op0_is(Register::RBP) => self.rbp = None,
            _ => {}
        }
    }
}

/// Walks every path of `code` (a function starting at address `ip`) from
/// its entry, with the argument registers listed in `args` (0-based
/// argument numbers) known there, and returns the facts found, in address
/// order. Branches inside the function are followed (each instruction is
/// read once, with the state of the first path that reaches it), so a
/// shared epilogue's `pop`s do not hide what a later block does.
pub(super) fn sweep(code: &[u8], ip: u64, args: &[u8]) -> Vec<Fact> {
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let mut by_addr: HashMap<u64, Instruction> = HashMap::new();
    let mut ins = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut ins);
        by_addr.insert(ins.ip(), ins);
    }
    let mut entry = State {
        rsp: Some(0),
        ..State::default()
    };
    for &a in args {
        if let Some(&r) = ARG_REGS.get(a as usize) {
            entry.roles.insert(r, Role::Arg(a));
        }
    }
    let mut facts: Vec<(u64, Fact)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut info = InstructionInfoFactory::new();
    let mut work = vec![(ip, entry)];
    while let Some((mut at, mut state)) = work.pop() {
        while let Some(ins) = by_addr.get(&at) {
            if !seen.insert(at) || ins.is_invalid() {
                break;
            }
            if let Some(f) = step(ins, &mut state, &mut info) {
                facts.push((at, f));
            }
            match ins.flow_control() {
                FlowControl::Return | FlowControl::Interrupt | FlowControl::Exception => break,
                FlowControl::IndirectBranch => break,
                FlowControl::UnconditionalBranch => {
                    if ins.op0_kind() == OpKind::NearBranch64 {
                        at = ins.near_branch_target();
                        continue;
                    }
                    break;
                }
                FlowControl::ConditionalBranch if ins.op0_kind() == OpKind::NearBranch64 => {
                    work.push((ins.near_branch_target(), state.clone()));
                }
                _ => {}
            }
            at = ins.next_ip();
        }
    }
    facts.sort_by_key(|(a, _)| *a);
    facts.into_iter().map(|(_, f)| f).collect()
}

/// One instruction: the fact it shows, then what it does to the registers.
fn step(ins: &Instruction, st: &mut State, info: &mut InstructionInfoFactory) -> Option<Fact> {
    let fact = read_fact(ins, &st.roles, &st.added);
    let new_role = role_after(ins, st);
    let add = added_after(ins, &st.added);
    st.track_stack(ins);
    // Whatever the instruction writes loses what it held.
    let written: Vec<Register> = info
        .info(ins)
        .used_registers()
        .iter()
        .filter(|u| {
            matches!(
                u.access(),
                OpAccess::Write | OpAccess::ReadWrite | OpAccess::CondWrite
            )
        })
        .map(|u| full(u.register()))
        .collect();
    for r in written {
        st.roles.remove(&r);
        st.added.remove(&r);
    }
    if ins.flow_control() == FlowControl::Call {
        for r in CLOBBERED {
            st.roles.remove(&r);
            st.added.remove(&r);
        }
    }
    if let Some((r, role)) = new_role {
        st.roles.insert(r, role);
    }
    if let Some((r, k)) = add {
        st.added.insert(r, k);
    }
    fact
}

fn full(r: Register) -> Register {
    r.full_register()
}

/// The argument a memory operand's base register holds (no index register).
fn field_of(ins: &Instruction, roles: &HashMap<Register, Role>) -> Option<(u8, i64)> {
    if ins.memory_index() != Register::None {
        return None;
    }
    match roles.get(&full(ins.memory_base()))? {
        Role::Arg(a) => Some((*a, ins.memory_displacement64() as i64)),
        _ => None,
    }
}

fn read_fact(
    ins: &Instruction,
    roles: &HashMap<Register, Role>,
    added: &HashMap<Register, i64>,
) -> Option<Fact> {
    if ins.flow_control() == FlowControl::Call && ins.op0_kind() == OpKind::NearBranch64 {
        return Some(Fact::Call {
            target: ins.near_branch_target(),
        });
    }
    match (ins.mnemonic(), ins.op_count()) {
        (Mnemonic::Mov | Mnemonic::Movsxd | Mnemonic::Movzx | Mnemonic::Movsx, 2)
            if ins.op0_kind() == OpKind::Register && ins.op1_kind() == OpKind::Memory =>
        {
            let (arg, disp) = field_of(ins, roles)?;
            Some(Fact::Load {
                arg,
                disp,
                size: ins.memory_size().size(),
            })
        }
        (Mnemonic::Mov, 2)
            if ins.op0_kind() == OpKind::Memory && ins.op1_kind() == OpKind::Register =>
        {
            let (to, disp) = field_of(ins, roles)?;
            if disp != 0 {
                return None;
            }
            match roles.get(&full(ins.op1_register()))? {
                Role::Field { arg, disp, size } => Some(Fact::StoreField {
                    to,
                    from: *arg,
                    disp: *disp,
                    size: (*size).min(ins.op1_register().size()),
                }),
                _ => None,
            }
        }
        (Mnemonic::Cmp, 2) => {
            let (mem, reg) = match (ins.op0_kind(), ins.op1_kind()) {
                (OpKind::Memory, OpKind::Register) => (0, ins.op1_register()),
                (OpKind::Register, OpKind::Memory) => (1, ins.op0_register()),
                _ => return None,
            };
            let _ = mem;
            let (arg, disp) = field_of(ins, roles)?;
            match roles.get(&full(reg))? {
                Role::Const(value) if reg.size() == 8 => Some(Fact::CompareConst {
                    arg,
                    disp,
                    value: *value,
                }),
                _ => None,
            }
        }
        (Mnemonic::Add, 2)
            if ins.has_lock_prefix()
                && ins.op0_kind() == OpKind::Memory
                && ins.memory_size().size() == 8
                && is_immediate(ins.op1_kind()) =>
        {
            let index = ins.memory_index();
            let scale = ins.memory_index_scale();
            let k = if index == Register::None {
                0
            } else {
                added.get(&full(index)).copied().unwrap_or(0)
            };
            let disp =
                (ins.memory_displacement64() as i64).wrapping_add(k.wrapping_mul(scale as i64));
            Some(Fact::LockAdd {
                scale,
                disp,
                imm: ins.immediate(1),
            })
        }
        _ => None,
    }
}

fn is_immediate(k: OpKind) -> bool {
    matches!(
        k,
        OpKind::Immediate8
            | OpKind::Immediate8to32
            | OpKind::Immediate8to64
            | OpKind::Immediate32
            | OpKind::Immediate32to64
            | OpKind::Immediate64
    )
}

/// The role the destination register gets from a move.
fn role_after(ins: &Instruction, st: &State) -> Option<(Register, Role)> {
    if ins.op_count() != 2 || ins.op0_kind() != OpKind::Register {
        return None;
    }
    let roles = &st.roles;
    let dst = ins.op0_register();
    match (ins.mnemonic(), ins.op1_kind()) {
        (Mnemonic::Mov, OpKind::Memory) if dst.size() == 8 && st.slot_of(ins).is_some() => {
            let role = *st.slots.get(&st.slot_of(ins)?)?;
            Some((full(dst), role))
        }
        (Mnemonic::Mov, OpKind::Register) if dst.size() == 8 => {
            let role = *roles.get(&full(ins.op1_register()))?;
            Some((full(dst), role))
        }
        (Mnemonic::Mov | Mnemonic::Movsxd | Mnemonic::Movzx | Mnemonic::Movsx, OpKind::Memory) => {
            let (arg, disp) = field_of(ins, roles)?;
            let size = ins.memory_size().size();
            Some((full(dst), Role::Field { arg, disp, size }))
        }
        (Mnemonic::Mov, k) if is_immediate(k) && dst.size() == 8 => {
            Some((full(dst), Role::Const(ins.immediate(1))))
        }
        _ => None,
    }
}

/// The running sum of immediates added to a register (`add r, imm` /
/// `sub r, imm`), so `r = x + k; [base + r*8]` is known to be `x*8 + 8k`.
fn added_after(ins: &Instruction, added: &HashMap<Register, i64>) -> Option<(Register, i64)> {
    if ins.op_count() != 2 || ins.op0_kind() != OpKind::Register || !is_immediate(ins.op1_kind()) {
        return None;
    }
    let r = full(ins.op0_register());
    let imm = ins.immediate(1) as i64;
    let before = added.get(&r).copied().unwrap_or(0);
    match ins.mnemonic() {
        Mnemonic::Add => Some((r, before.wrapping_add(imm))),
        Mnemonic::Sub => Some((r, before.wrapping_sub(imm))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `mov %rsi,%r14; mov %rdi,%r13; call f; mov 0x1044d0(%r13),%eax;
    /// xor %ebx,%ebx; mov %eax,(%r14); ret`: NCCL 2.28.9's ncclCommUserRank
    /// reduced to the instructions that matter.
    #[test]
    fn getter_through_callee_saved_registers() {
        let code = [
            0x49, 0x89, 0xf6, // mov %rsi,%r14
            0x49, 0x89, 0xfd, // mov %rdi,%r13
            0xe8, 0x00, 0x00, 0x00, 0x00, // call next
            0x41, 0x8b, 0x85, 0xd0, 0x44, 0x10, 0x00, // mov 0x1044d0(%r13),%eax
            0x31, 0xdb, // xor %ebx,%ebx
            0x41, 0x89, 0x06, // mov %eax,(%r14)
            0xc3,
        ];
        let facts = sweep(&code, 0x1000, &[0, 1]);
        assert!(facts.contains(&Fact::StoreField {
            to: 1,
            from: 0,
            disp: 0x1044d0,
            size: 4
        }));
        // After the call, %rdi no longer holds the argument.
        let clobbered = [
            0xe8, 0x00, 0x00, 0x00, 0x00, // call
            0x8b, 0x87, 0xf0, 0x03, 0x00, 0x00, // mov 0x3f0(%rdi),%eax
            0x89, 0x06, // mov %eax,(%rsi)
        ];
        let facts = sweep(&clobbered, 0, &[0, 1]);
        assert!(!facts
            .iter()
            .any(|f| matches!(f, Fact::StoreField { .. } | Fact::Load { .. })));
    }

    /// NCCL 2.28.9's CommCheck: `movabs $NCCL_MAGIC,%rdx; cmp %rdx,(%rdi);
    /// ...; cmp %rdx,0x108650(%rdi)`.
    #[test]
    fn magic_compares() {
        let code = [
            0x48, 0xba, 0x80, 0x02, 0x80, 0x02, 0x80, 0x02, 0x80, 0x02, // movabs
            0x48, 0x39, 0x17, // cmp %rdx,(%rdi)
            0x48, 0x39, 0x97, 0x50, 0x86, 0x10, 0x00, // cmp %rdx,0x108650(%rdi)
        ];
        let facts = sweep(&code, 0, &[0]);
        assert_eq!(
            facts,
            vec![
                Fact::CompareConst {
                    arg: 0,
                    disp: 0,
                    value: 0x0280_0280_0280_0280
                },
                Fact::CompareConst {
                    arg: 0,
                    disp: 0x108650,
                    value: 0x0280_0280_0280_0280
                },
            ]
        );
    }

    /// NCCL 2.28.9's seqNumber update: `movslq 0x8(%rbx),%rax; mov
    /// 0x10(%rbp),%rdx; add $0x20d42,%rax; lock addq $0x1,(%rdx,%rax,8)`.
    #[test]
    fn counter_update_folds_the_added_index() {
        let code = [
            0x48, 0x63, 0x43, 0x08, // movslq 0x8(%rbx),%rax
            0x48, 0x8b, 0x55, 0x10, // mov 0x10(%rbp),%rdx
            0x48, 0x05, 0x42, 0x0d, 0x02, 0x00, // add $0x20d42,%rax
            0xf0, 0x48, 0x83, 0x04, 0xc2, 0x01, // lock addq $0x1,(%rdx,%rax,8)
        ];
        let facts = sweep(&code, 0, &[0]);
        assert_eq!(
            facts,
            vec![Fact::LockAdd {
                scale: 8,
                disp: 0x106a10,
                imm: 1
            }]
        );
        // A later write of the index register forgets the addition.
        let code2 = [
            0x48, 0x05, 0x42, 0x0d, 0x02, 0x00, // add $0x20d42,%rax
            0x48, 0x63, 0x43, 0x08, // movslq 0x8(%rbx),%rax
            0xf0, 0x48, 0x83, 0x44, 0xc2, 0x20, 0x01, // lock addq $0x1,0x20(%rdx,%rax,8)
        ];
        assert_eq!(
            sweep(&code2, 0, &[]),
            vec![Fact::LockAdd {
                scale: 8,
                disp: 0x20,
                imm: 1
            }]
        );
    }
}
