package qemurig

import (
	"bytes"
	"debug/elf"
	"fmt"
	"path"
	"sort"
	"strings"
)

// ModuleName returns the kernel's name for a module file: its base name
// without ".ko", with dashes as underscores (can-raw.ko is can_raw).
func ModuleName(file string) string {
	base := path.Base(file)
	base = strings.TrimSuffix(base, ".ko")
	return strings.ReplaceAll(base, "-", "_")
}

// modInfo is what the rig reads from a module's .modinfo section.
type modInfo struct {
	// Depends are the modules it needs loaded first, as computed by
	// modpost from the symbols it uses (the same data depmod writes into
	// modules.dep).
	Depends []string
	// Vermagic is the kernel release and build options it was built for;
	// the kernel refuses a module whose vermagic differs from its own.
	Vermagic string
}

// readModInfo reads the "depends=" and "vermagic=" entries of a module's
// .modinfo section.
func readModInfo(ko []byte) (modInfo, error) {
	var mi modInfo
	f, err := elf.NewFile(bytes.NewReader(ko))
	if err != nil {
		return mi, fmt.Errorf("parse module: %w", err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return mi, fmt.Errorf("module has no .modinfo section")
	}
	data, err := sec.Data()
	if err != nil {
		return mi, fmt.Errorf("read .modinfo: %w", err)
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("vermagic=")); ok {
			mi.Vermagic = string(v)
		}
		v, ok := bytes.CutPrefix(kv, []byte("depends="))
		if !ok {
			continue
		}
		for _, d := range strings.Split(string(v), ",") {
			if d = strings.TrimSpace(d); d != "" {
				mi.Depends = append(mi.Depends, ModuleName(d))
			}
		}
	}
	return mi, nil
}

// LoadOrder returns the modules to insmod, dependencies first, for the
// wanted modules. deps maps a module name to the names it depends on;
// builtin names are part of the kernel image and are left out. An unknown
// module or a dependency cycle is an error.
func LoadOrder(wanted []string, deps map[string][]string, builtin map[string]bool) ([]string, error) {
	var order []string
	state := make(map[string]int) // 1 visiting, 2 done
	var visit func(name string, from string) error
	visit = func(name, from string) error {
		name = ModuleName(name)
		if builtin[name] {
			return nil
		}
		switch state[name] {
		case 1:
			return fmt.Errorf("module dependency cycle at %s", name)
		case 2:
			return nil
		}
		d, ok := deps[name]
		if !ok {
			if from != "" {
				return fmt.Errorf("module %s (needed by %s) not found in the kernel package", name, from)
			}
			return fmt.Errorf("module %s not found in the kernel package", name)
		}
		state[name] = 1
		sorted := append([]string(nil), d...)
		sort.Strings(sorted)
		for _, dep := range sorted {
			if err := visit(dep, name); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, name)
		return nil
	}
	for _, w := range wanted {
		if err := visit(w, ""); err != nil {
			return nil, err
		}
	}
	return order, nil
}
