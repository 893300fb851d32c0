# SPDX-License-Identifier: Apache-2.0
# cbctl.bash — bash completion for cbctl: commands, options, states, and
# circuit names (asked of cbd with `cbctl list --names`, on the socket the
# command line names). Installed as .../bash-completion/completions/cbctl;
# needs only bash (not the bash-completion package's helpers).

_cbctl_names()
{
	# The same cbctl as typed (a build tree's works too), quick timeout.
	"${COMP_WORDS[0]}" "${_cbctl_socket[@]}" --timeout 1000 list --names 2>/dev/null
}

_cbctl()
{
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
	local commands="ping list get policy watch top stats metrics open close release
		half-open delete reload"
	local global="--socket --json --timeout --help --version"
	local cmd="" i opts word
	_cbctl_socket=()
	COMPREPLY=()

	# The command so far, and a socket given on the line.
	for ((i = 1; i < COMP_CWORD; i++)); do
		word=${COMP_WORDS[i]}
		case $word in
		-s | --socket)
			_cbctl_socket=(--socket "${COMP_WORDS[i + 1]}")
			((i++))
			;;
		--socket=*) _cbctl_socket=("$word") ;;
		-t | --timeout | --state | --sort | --for | --reason | --interval | --filter) ((i++)) ;;
		-*) ;;
		*) [[ -z $cmd ]] && cmd=$word ;;
		esac
	done

	case $prev in
	-s | --socket)
		mapfile -t COMPREPLY < <(compgen -f -- "$cur")
		return 0
		;;
	--state)
		mapfile -t COMPREPLY < <(compgen -W "open half_open closed" -- "$cur")
		return 0
		;;
	--sort)
		mapfile -t COMPREPLY < <(compgen -W "name state" -- "$cur")
		return 0
		;;
	-t | --timeout | --for | --reason | --interval | --filter) return 0 ;;
	esac

	if [[ $cur == -* ]]; then
		opts=$global
		case $cmd in
		list) opts+=" --state --sort --names" ;;
		stats) opts+=" --all" ;;
		top) opts+=" --interval --filter --once" ;;
		open | close) opts+=" --for --reason --no-hold" ;;
		esac
		mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
		return 0
	fi
	if [[ -z $cmd ]]; then
		mapfile -t COMPREPLY < <(compgen -W "$commands" -- "$cur")
		return 0
	fi
	case $cmd in
	get | policy | watch | open | close | release | half-open | half_open | delete)
		mapfile -t COMPREPLY < <(compgen -W "$(_cbctl_names)" -- "$cur")
		;;
	esac
	return 0
}

complete -F _cbctl cbctl
