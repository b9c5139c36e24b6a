// A few pages of plain English (written for this project) from which the demo tokenizer learns its
// merges, so demo token ids decode to word pieces rather than single bytes.
#include "synth/tokenizer_files.h"

namespace deltafin::synth {

std::string_view english_corpus() {
  return R"(The harbor town woke slowly on the first cold morning of the year. Fishing boats rocked
against the old stone wall, and the smell of salt and smoke drifted up the narrow streets. A baker
opened her shutters and set out bread that was still warm from the oven. Children ran past on their
way to school, their breath making small white clouds in the air. Down by the water, an old man
mended a net with quick and patient hands, the way his father had taught him many years before.

Nobody in the town could remember a winter that had started so early. The river had frozen along
its edges, and the road over the hills was closed for three days after the first heavy snow. People
told each other that the weather would turn, that it always did, but they stacked more wood by their
doors all the same. In the evenings the windows glowed yellow, and the sound of music and talk came
out of the inn at the corner of the square.

The town library stood at the top of the hill. It was a small building with a green door and tall
windows that looked out over the sea. Inside, the shelves reached almost to the ceiling, and a
wooden ladder ran along a rail so that readers could find the books on the highest rows. The
librarian had worked there for more than thirty years. She knew where every book was kept, and she
could tell you which ones had been borrowed most often and which ones had never left the building.

On Saturdays the library held a reading hour for children. They sat on cushions on the floor while
the librarian read stories about sailors, dragons, lost kingdoms and talking animals. When a story
ended, the children always asked for another one, and she always said that there was time for just
one more. Then she would read two or three more before their parents came to take them home.

Learning to cook is a lot like learning to play music. At first you follow the recipe exactly,
measuring every spoon of flour and every pinch of salt. You watch the clock and worry about whether
the water is hot enough. After a while you begin to notice how the dough should feel under your
hands, how the sauce should smell when it is ready, and how the color of the onions changes as they
soften in the pan. The recipe becomes a guide rather than a rule, and you start to make the dish
your own.

A good soup begins with a good stock. Put the bones and vegetables in a large pot, cover them with
cold water, and let them simmer for several hours. Do not let the water boil too hard, or the stock
will turn cloudy. Skim the foam from the top from time to time. When the stock is done, strain it
through a fine sieve and let it cool. It will keep in a cold place for a few days, and it can be used
for soups, stews and sauces of every kind.

The computer on your desk does a remarkable amount of work every second. It reads numbers from
memory, adds and multiplies them, compares them, and writes the results back. Each of these steps
is simple, but billions of them happen in the time it takes you to blink. Programs are lists of such
steps, written by people who think carefully about what the machine should do and in which order.
A small mistake in one line can change the result of the whole program, which is why programmers
test their work again and again.

Memory is one of the most important parts of any computer. Fast memory is expensive and small,
while slow memory is cheap and large. Engineers arrange them in layers, keeping the data that is
needed most often close to the processor and moving the rest farther away. When a program asks for
something that is not in fast memory, it has to wait while the data is fetched from a slower place.
Good programs are written so that they wait as little as possible.

A language model reads text as a sequence of tokens. A token can be a whole word, part of a word, a
number or a mark of punctuation. The model looks at the tokens it has seen so far and predicts which
token is likely to come next. It does this by passing numbers through many layers, each of which
mixes and transforms them. At the end, the model produces a score for every token in its vocabulary,
and the token with the highest score is often the one that is chosen.

Some models are very large, with more parameters than a single machine can hold in its memory. One
way to run them is to keep only the parts that are used for every token close at hand, and to read
the other parts from disk when they are needed. This works well when each token only needs a small
share of the whole model. The art lies in reading the right pieces early enough, so that the
processor never sits idle while it waits for the disk.

In the spring the snow melted and the river ran high and brown. The road over the hills opened
again, and carts came down from the farms with eggs, cheese, apples and wool. The market in the
square grew busy and loud. Traders called out their prices, dogs barked, and the church bell rang
the hours. The fishing boats went out before dawn and came back in the afternoon, their decks
shining with silver fish.

The old man finished mending his net and hung it on a post to dry. He sat down on a wooden bench and
watched the boats come in. A young girl asked him what he was looking at. He told her that he was
counting the boats, because his father had always counted them, and his grandfather before that.
She asked what would happen if one of them did not come back. He said that the whole town would go
down to the harbor and wait, and that they would light a fire on the point so that the boat could
find its way home in the dark.

Walking is one of the simplest ways to keep healthy. It needs no special equipment beyond a pair of
comfortable shoes, and it can be done almost anywhere. A walk in the morning can clear the mind
before a long day of work. A walk in the evening can help you sleep. Many people find that their
best ideas come to them while they are walking, perhaps because the steady rhythm of their steps
leaves the mind free to wander.

Gardens teach patience. You plant a seed, water it, and wait. For days nothing seems to happen.
Then a small green shoot pushes up through the soil, and a few weeks later there are leaves, then
flowers, then fruit. Every season brings its own work: digging and planting in the spring, watering
and weeding in the summer, harvesting in the autumn, and resting in the winter while the ground
sleeps under the frost.

Numbers appear everywhere in daily life. We count the coins in our pockets, measure the flour for a
cake, check the time before we leave the house, and read the temperature on a cold day. There are
12 months in a year, 7 days in a week, 24 hours in a day and 60 minutes in an hour. A train that
leaves at 8:15 and arrives at 10:45 has been travelling for two and a half hours.

"Where are you going?" asked the girl. "To the lighthouse," said the keeper. "Someone has to make
sure the lamp is lit before the sun goes down." She followed him up the winding stairs, counting
each step, until they reached the top. From there she could see the whole coast, the town, the
hills, and the long line of the horizon where the sky met the sea. It's the best view in the
world, he told her, and she believed him.
)";
}

}  // namespace deltafin::synth
